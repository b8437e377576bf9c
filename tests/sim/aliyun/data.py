"""Static catalogue of the emulated cloud: regions and zones, instance types, public images.

Instance type shapes (vCPU, memory, GPU model and count) follow Alibaba Cloud's "GPU-accelerated
compute-optimized instance families" page (https://www.alibabacloud.com/help/en/ecs/user-guide/
gpu-accelerated-compute-optimized-and-vgpu-accelerated-instance-families-1, read 2026-12-02).
Prices are SIMULATED list prices in USD per hour, roughly the size of the public ones; tests that
care about a price set their own through the admin API (`POST /_sim/price`).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GpuSpec:
    nvidia_smi_name: str  # what `nvidia-smi --query-gpu=name` prints
    memory_mib: int  # what `nvidia-smi --query-gpu=memory.total` prints
    spec: str  # DescribeInstances GPUSpec, e.g. "NVIDIA T4"


GPUS: dict[str, GpuSpec] = {
    "T4": GpuSpec("Tesla T4", 15360, "NVIDIA T4"),
    "A10": GpuSpec("NVIDIA A10", 23028, "NVIDIA A10"),
    "V100-16GB": GpuSpec("Tesla V100-SXM2-16GB", 16160, "NVIDIA V100"),
    "V100-32GB": GpuSpec("Tesla V100-SXM2-32GB", 32510, "NVIDIA V100"),
    "A100-40GB": GpuSpec("NVIDIA A100-SXM4-40GB", 40960, "NVIDIA A100"),
    "A100-80GB": GpuSpec("NVIDIA A100-SXM4-80GB", 81920, "NVIDIA A100"),
    "P100": GpuSpec("Tesla P100-PCIE-16GB", 16280, "NVIDIA P100"),
    "P4": GpuSpec("Tesla P4", 7611, "NVIDIA P4"),
    "L20": GpuSpec("NVIDIA L20", 46068, "NVIDIA L20"),
}


@dataclass(frozen=True)
class InstanceTypeSpec:
    name: str
    cpu: int
    memory_gib: float
    gpu: str | None  # key into GPUS
    gpu_count: int
    on_demand: float  # simulated USD per hour

    @property
    def family(self) -> str:
        return "ecs." + self.name.split(".")[1].split("-")[0]

    @property
    def spot(self) -> float:
        # Spot capacity on Alibaba Cloud typically trades at 10-30 % of the pay-as-you-go price.
        return round(self.on_demand * 0.3, 4)


def _types(
    rows: list[tuple[str, int, float, str | None, int, float]],
) -> dict[str, InstanceTypeSpec]:
    return {row[0]: InstanceTypeSpec(*row) for row in rows}


INSTANCE_TYPES: dict[str, InstanceTypeSpec] = _types(
    [
        ("ecs.gn6i-c4g1.xlarge", 4, 15, "T4", 1, 1.17),
        ("ecs.gn6i-c8g1.2xlarge", 8, 31, "T4", 1, 1.37),
        ("ecs.gn6i-c16g1.4xlarge", 16, 62, "T4", 1, 1.79),
        ("ecs.gn6i-c24g1.6xlarge", 24, 93, "T4", 1, 2.21),
        ("ecs.gn6i-c40g1.10xlarge", 40, 155, "T4", 1, 3.06),
        ("ecs.gn6i-c24g1.12xlarge", 48, 186, "T4", 2, 4.42),
        ("ecs.gn6i-c24g1.24xlarge", 96, 372, "T4", 4, 8.84),
        ("ecs.gn7i-c8g1.2xlarge", 8, 30, "A10", 1, 1.83),
        ("ecs.gn7i-c16g1.4xlarge", 16, 60, "A10", 1, 2.12),
        ("ecs.gn7i-c32g1.8xlarge", 32, 188, "A10", 1, 2.89),
        ("ecs.gn7i-c48g1.12xlarge", 48, 310, "A10", 1, 3.66),
        ("ecs.gn7i-c56g1.14xlarge", 56, 346, "A10", 1, 4.05),
        ("ecs.gn7i-c32g1.16xlarge", 64, 376, "A10", 2, 5.78),
        ("ecs.gn7i-c32g1.32xlarge", 128, 752, "A10", 4, 11.56),
        ("ecs.gn7i-2x.8xlarge", 32, 128, "A10", 2, 4.10),
        ("ecs.gn7i-4x.8xlarge", 32, 128, "A10", 4, 7.90),
        ("ecs.gn7i-4x.16xlarge", 64, 256, "A10", 4, 8.60),
        ("ecs.gn7i-8x.16xlarge", 64, 256, "A10", 8, 15.80),
        ("ecs.gn7i-8x.32xlarge", 128, 512, "A10", 8, 17.20),
        ("ecs.gn6v-c8g1.2xlarge", 8, 32, "V100-16GB", 1, 2.95),
        ("ecs.gn6v-c8g1.4xlarge", 16, 64, "V100-16GB", 2, 5.90),
        ("ecs.gn6v-c8g1.8xlarge", 32, 128, "V100-16GB", 4, 11.80),
        ("ecs.gn6v-c8g1.16xlarge", 64, 256, "V100-16GB", 8, 23.60),
        ("ecs.gn6v-c10g1.20xlarge", 82, 336, "V100-16GB", 8, 24.50),
        ("ecs.gn6e-c12g1.3xlarge", 12, 92, "V100-32GB", 1, 3.43),
        ("ecs.gn6e-c12g1.6xlarge", 24, 184, "V100-32GB", 2, 6.86),
        ("ecs.gn6e-c12g1.12xlarge", 48, 368, "V100-32GB", 4, 13.72),
        ("ecs.gn6e-c12g1.24xlarge", 96, 736, "V100-32GB", 8, 27.44),
        ("ecs.gn7-c12g1.3xlarge", 12, 94, "A100-40GB", 1, 4.20),
        ("ecs.gn7-c13g1.13xlarge", 52, 378, "A100-40GB", 4, 16.80),
        ("ecs.gn7-c13g1.26xlarge", 104, 756, "A100-40GB", 8, 33.60),
        ("ecs.gn7e-c16g1.4xlarge", 16, 125, "A100-80GB", 1, 5.10),
        ("ecs.gn7e-c16g1.8xlarge", 32, 250, "A100-80GB", 2, 10.20),
        ("ecs.gn7e-c16g1.16xlarge", 64, 500, "A100-80GB", 4, 20.40),
        ("ecs.gn7e-c16g1.32xlarge", 128, 1000, "A100-80GB", 8, 40.80),
        ("ecs.gn8is.2xlarge", 8, 64, "L20", 1, 2.60),
        ("ecs.gn8is.4xlarge", 16, 128, "L20", 1, 3.10),
        ("ecs.gn5-c4g1.xlarge", 4, 30, "P100", 1, 1.60),
        ("ecs.gn5i-c2g1.large", 2, 8, "P4", 1, 0.80),
        ("ecs.g7.large", 2, 8, None, 0, 0.09),
        ("ecs.g7.xlarge", 4, 16, None, 0, 0.18),
        ("ecs.g7.2xlarge", 8, 32, None, 0, 0.36),
    ]
)

# Zone ids as the console shows them (read 2026-12-02). A region not listed here still works:
# it gets two synthetic zones, "<region>-a" and "<region>-b".
REGION_ZONES: dict[str, tuple[str, ...]] = {
    "cn-hangzhou": ("cn-hangzhou-h", "cn-hangzhou-i", "cn-hangzhou-j", "cn-hangzhou-k"),
    "cn-shanghai": ("cn-shanghai-l", "cn-shanghai-m", "cn-shanghai-n"),
    "cn-beijing": ("cn-beijing-h", "cn-beijing-i", "cn-beijing-k", "cn-beijing-l"),
    "cn-shenzhen": ("cn-shenzhen-d", "cn-shenzhen-e", "cn-shenzhen-f"),
    "cn-zhangjiakou": ("cn-zhangjiakou-a", "cn-zhangjiakou-b", "cn-zhangjiakou-c"),
    "cn-wulanchabu": ("cn-wulanchabu-a", "cn-wulanchabu-b", "cn-wulanchabu-c"),
    "cn-hongkong": ("cn-hongkong-b", "cn-hongkong-c", "cn-hongkong-d"),
    "ap-southeast-1": ("ap-southeast-1a", "ap-southeast-1b", "ap-southeast-1c"),
    "ap-southeast-5": ("ap-southeast-5a", "ap-southeast-5b"),
    "ap-northeast-1": ("ap-northeast-1a", "ap-northeast-1b"),
    "us-west-1": ("us-west-1a", "us-west-1b"),
    "us-east-1": ("us-east-1a", "us-east-1b"),
    "eu-central-1": ("eu-central-1a", "eu-central-1b"),
}

LOCAL_NAMES = {
    "cn-hangzhou": "China (Hangzhou)",
    "cn-shanghai": "China (Shanghai)",
    "cn-beijing": "China (Beijing)",
    "ap-southeast-1": "Singapore",
    "us-west-1": "US (Silicon Valley)",
    "eu-central-1": "Germany (Frankfurt)",
}


def zones_of(region: str) -> tuple[str, ...]:
    return REGION_ZONES.get(region, (f"{region}-a", f"{region}-b"))


@dataclass(frozen=True)
class ImageSpec:
    image_id: str  # public images use the file name as their id, e.g. "ubuntu_22_04_x64_..."
    os_name_en: str
    platform: str
    creation_time: str
    family: str
    size_gib: int = 20


# Public ("system") images, present in every region. Two Ubuntu 22.04 builds, so that a
# `most_recent` lookup has something to choose between.
SYSTEM_IMAGES: tuple[ImageSpec, ...] = (
    ImageSpec(
        "ubuntu_22_04_x64_20G_alibase_20240508.vhd",
        "Ubuntu  22.04 64 bit",
        "Ubuntu",
        "2024-05-09T02:11:37Z",
        "acs:ubuntu_22_04_x64",
    ),
    ImageSpec(
        "ubuntu_22_04_x64_20G_alibase_20241120.vhd",
        "Ubuntu  22.04 64 bit",
        "Ubuntu",
        "2024-11-21T03:40:12Z",
        "acs:ubuntu_22_04_x64",
    ),
    ImageSpec(
        "ubuntu_24_04_x64_20G_alibase_20241115.vhd",
        "Ubuntu  24.04 64 bit",
        "Ubuntu",
        "2024-11-16T05:02:44Z",
        "acs:ubuntu_24_04_x64",
    ),
    ImageSpec(
        "ubuntu_20_04_x64_20G_alibase_20240508.vhd",
        "Ubuntu  20.04 64 bit",
        "Ubuntu",
        "2024-05-09T02:09:03Z",
        "acs:ubuntu_20_04_x64",
    ),
    ImageSpec(
        "aliyun_3_x64_20G_alibase_20241103.vhd",
        "Alibaba Cloud Linux  3.2104 LTS 64 bit",
        "Aliyun",
        "2024-11-04T08:15:30Z",
        "acs:alibaba_cloud_linux_3_2104_lts_x64",
    ),
    ImageSpec(
        "centos_7_9_x64_20G_alibase_20240628.vhd",
        "CentOS  7.9 64 bit",
        "CentOS",
        "2024-06-29T01:22:10Z",
        "acs:centos_7_9_x64",
    ),
)

SYSTEM_DISK_CATEGORIES = (
    "cloud_essd",
    "cloud_ssd",
    "cloud_efficiency",
    "cloud_auto",
    "cloud_essd_entry",
    "cloud",
)
# Simulated USD per GiB-hour of system disk, for DescribePrice's systemDisk line.
DISK_PRICE_PER_GIB_HOUR = {
    "cloud_essd": 0.000_2,
    "cloud_ssd": 0.000_15,
    "cloud_efficiency": 0.000_07,
    "cloud_auto": 0.000_2,
    "cloud_essd_entry": 0.000_1,
    "cloud": 0.000_05,
}
