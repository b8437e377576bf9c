#!/bin/bash
# orch first-boot set-up of a GPU box (rendered into user data by orchestrator/provision/userdata.py).
#
# 1. Installs the box's expiry: orch-expire.timer powers the box off at ORCH_EXPIRES_AT (UTC);
#    AWS then terminates it (instance_initiated_shutdown_behavior = terminate). Done first, so a
#    failed driver install still cannot leak a box.
# 2. Installs the NVIDIA driver (and CUDA toolkit) only when nvidia-smi is absent: Deep Learning
#    images already have them. Ubuntu 22.04/24.04, Amazon Linux 2023, Alibaba Cloud Linux 3.
#    The kernel-module flavour follows the GPUs: proprietary for Volta and older (V100 on p3,
#    gn6v, gn6e), open for Turing and newer (Blackwell has only the open one). When nouveau
#    holds the GPU it is blacklisted and the box reboots once; orch-install-drivers.service
#    runs this script again after the reboot.
# 3. Writes /var/lib/orch/ready (or /var/lib/orch/failed with the reason) for `orch check`.
#
# Idempotent: once the ready marker exists a re-run does nothing. Everything goes to
# /var/log/orch-install-drivers.log. All paths sit under ORCH_ROOT (default "") so tests can run
# the script against a temporary root with stub commands on PATH.
#
# Settings (environment): ORCH_EXPIRES_AT (YYYY-MM-DDTHH:MM:SSZ or empty), ORCH_CLOUD,
# ORCH_DRIVER_BRANCH (driver branch, default 580: NVIDIA's current long-term branch),
# ORCH_DRIVER_FLAVOUR (open | proprietary; default: chosen from the GPUs' PCI device ids),
# ORCH_DNF_DRIVER_STREAM (dnf module stream; default <branch>-open or <branch>-dkms),
# ORCH_INSTALL_CUDA (1 = also the CUDA toolkit).
set -Eeuo pipefail

ORCH_ROOT="${ORCH_ROOT:-}"
ORCH_EXPIRES_AT="${ORCH_EXPIRES_AT:-}"
ORCH_CLOUD="${ORCH_CLOUD:-}"
ORCH_DRIVER_BRANCH="${ORCH_DRIVER_BRANCH:-580}"
ORCH_DRIVER_FLAVOUR="${ORCH_DRIVER_FLAVOUR:-}"
ORCH_DNF_DRIVER_STREAM="${ORCH_DNF_DRIVER_STREAM:-}"
ORCH_INSTALL_CUDA="${ORCH_INSTALL_CUDA:-1}"

LOG="$ORCH_ROOT/var/log/orch-install-drivers.log"
STATE_DIR="$ORCH_ROOT/var/lib/orch"
READY="$STATE_DIR/ready"
FAILED="$STATE_DIR/failed"
UNIT_DIR="$ORCH_ROOT/etc/systemd/system"
OS_RELEASE="$ORCH_ROOT/etc/os-release"
MODPROBE_DIR="$ORCH_ROOT/etc/modprobe.d"
RESUME_UNIT="orch-install-drivers.service"
RESUME_SCRIPT="$STATE_DIR/install_drivers.sh"
REBOOTED="$STATE_DIR/rebooted-for-nouveau"
NVIDIA_REPOS="https://developer.download.nvidia.com/compute/cuda/repos"

mkdir -p "${LOG%/*}" "$STATE_DIR"
exec >>"$LOG" 2>&1

log() { printf '%s orch-install-drivers: %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$*"; }

fail() {
    log "FAILED: $*"
    printf '%s\n' "$*" >"$FAILED"
    exit 1
}

# Any command that fails outside a test (`if`, `||`) ends the run with a failed marker.
trap 'fail "command failed (exit $?) at line $LINENO: $BASH_COMMAND"' ERR

run() { # a step that must succeed
    log "+ $*"
    "$@" || fail "'$*' failed (exit $?)"
}

try() { # a step whose failure is only logged
    log "+ $*"
    "$@" || log "'$*' failed (exit $?), carrying on"
}

# ------------------------------------------------------------------------------------ expiry

install_expiry() {
    if [[ -z "$ORCH_EXPIRES_AT" ]]; then
        log "no expiry set: the box lives until \`orch down\` or the sweeper removes it"
        return 0
    fi
    if [[ ! "$ORCH_EXPIRES_AT" =~ ^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z$ ]]; then
        fail "ORCH_EXPIRES_AT '$ORCH_EXPIRES_AT' is not YYYY-MM-DDTHH:MM:SSZ"
    fi
    local calendar epoch
    calendar="${ORCH_EXPIRES_AT%Z}"
    calendar="${calendar/T/ } UTC"
    epoch="$(date -u -d "$ORCH_EXPIRES_AT" +%s)" || fail "cannot parse expiry $ORCH_EXPIRES_AT"
    mkdir -p "$UNIT_DIR"
    # The service re-checks the clock, so the boot-time trigger below only powers off a box
    # that was started again after its expiry.
    cat >"$UNIT_DIR/orch-expire.service" <<EOF
[Unit]
Description=orch: power this box off, it expired at $ORCH_EXPIRES_AT

[Service]
Type=oneshot
ExecStart=/bin/sh -c 'if [ "\$\$(date -u +%%s)" -ge $epoch ]; then exec systemctl poweroff; fi'
EOF
    cat >"$UNIT_DIR/orch-expire.timer" <<EOF
[Unit]
Description=orch: expiry of this box at $ORCH_EXPIRES_AT

[Timer]
OnCalendar=$calendar
OnBootSec=2min
Persistent=true
AccuracySec=30s

[Install]
WantedBy=timers.target
EOF
    run systemctl daemon-reload
    run systemctl enable --now orch-expire.timer
    log "expiry timer set for $calendar"
    if (($(date -u +%s) >= epoch)); then
        log "the box is already past its expiry: powering off"
        run systemctl poweroff
        exit 0
    fi
}

# ---------------------------------------------------------------------------- detection

read_os_release() { # prints "ID VERSION_ID"
    # shellcheck source=/dev/null
    (. "$OS_RELEASE" && printf '%s %s\n' "${ID:-unknown}" "${VERSION_ID:-unknown}")
}

# NVIDIA display (0300) and 3D (0302) controllers; NVSwitch bridges (0680) are not GPUs.
count_gpus() {
    if command -v lspci >/dev/null 2>&1; then
        lspci -nn -d 10de: | grep -cE '\[030[02]\]' || true
        return 0
    fi
    local count=0 dev
    for dev in "$ORCH_ROOT"/sys/bus/pci/devices/*; do
        [[ -r "$dev/vendor" && -r "$dev/class" ]] || continue
        [[ "$(cat "$dev/vendor")" == 0x10de && "$(cat "$dev/class")" == 0x030[02]* ]] || continue
        count=$((count + 1))
    done
    echo "$count"
}

# PCI device ids (hex, lower case) of the NVIDIA GPUs, one a line.
gpu_device_ids() {
    if command -v lspci >/dev/null 2>&1; then
        lspci -nn -d 10de: | grep -E '\[030[02]\]' | grep -oE '\[10de:[0-9a-fA-F]{4}\]' |
            cut -c7-10 | tr 'A-F' 'a-f' || true
        return 0
    fi
    local dev id
    for dev in "$ORCH_ROOT"/sys/bus/pci/devices/*; do
        [[ -r "$dev/vendor" && -r "$dev/class" && -r "$dev/device" ]] || continue
        [[ "$(cat "$dev/vendor")" == 0x10de && "$(cat "$dev/class")" == 0x030[02]* ]] || continue
        id="$(cat "$dev/device")"
        id="${id#0x}"
        printf '%s\n' "${id,,}"
    done
}

# Open kernel modules are for Turing and newer only; proprietary ones for Volta and older
# (NVIDIA Driver Installation Guide, "Kernel Modules", read 2026-12-03). Turing and newer GPUs
# have device ids from 0x1e00 up (TU102 0x1e02, the lowest in NVIDIA/open-gpu-kernel-modules'
# "Compatible GPUs"); V100 is 0x1db1..0x1df6.
choose_flavour() { # $@: device ids
    if [[ -n "$ORCH_DRIVER_FLAVOUR" ]]; then
        echo "$ORCH_DRIVER_FLAVOUR"
        return 0
    fi
    local id
    for id in "$@"; do
        [[ "$id" =~ ^[0-9a-f]{4}$ ]] || continue
        if ((16#$id < 16#1e00)); then
            echo proprietary
            return 0
        fi
    done
    echo open
}

has_nvswitch() {
    command -v lspci >/dev/null 2>&1 && lspci -nn -d 10de: | grep -qE '\[0680\]'
}

driver_works() {
    command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1
}

# ---------------------------------------------------------------------------- installers

install_ubuntu() { # $1: open | proprietary
    export DEBIAN_FRONTEND=noninteractive
    # cloud-init and unattended-upgrades hold the dpkg lock early in boot: wait for it.
    local apt=(apt-get -y -q -o DPkg::Lock::Timeout=900)
    # Ubuntu's own signed driver packages: nvidia-driver-<branch>-server (proprietary modules)
    # and nvidia-driver-<branch>-server-open (open modules).
    local driver="nvidia-driver-${ORCH_DRIVER_BRANCH}-server"
    [[ "$1" == open ]] && driver+="-open"
    local packages=("linux-headers-$(uname -r)" "$driver")
    if has_nvswitch; then
        packages+=("nvidia-fabricmanager-${ORCH_DRIVER_BRANCH}")
    fi
    if [[ "$ORCH_INSTALL_CUDA" == 1 ]]; then
        # NVIDIA's CUDA repo only if the image already trusts it (its key is on the image);
        # otherwise Ubuntu's own packaging of the toolkit.
        if grep -rqs developer.download.nvidia.com "$ORCH_ROOT/etc/apt/sources.list.d/"; then
            packages+=(cuda-toolkit)
        else
            packages+=(nvidia-cuda-toolkit)
        fi
    fi
    run "${apt[@]}" update
    run "${apt[@]}" install --no-install-recommends "${packages[@]}"
}

# RPM of the running kernel: "kernel", or "kernel6.12" for AL2023's 6.12 (kernel6.12-devel...).
kernel_package() {
    local release name=""
    release="$(uname -r)"
    if command -v rpm >/dev/null 2>&1; then
        name="$(rpm -q --qf '%{NAME}\n' -f "/boot/vmlinuz-$release" 2>/dev/null | head -n 1)" ||
            name=""
    fi
    if [[ "$name" =~ ^kernel[0-9.]*$ ]]; then
        echo "$name"
    elif [[ "$release" == *amzn2023* && "$release" =~ ^6\.([0-9]+)\. ]] &&
        [[ "${BASH_REMATCH[1]}" != 1 ]]; then
        echo "kernel6.${BASH_REMATCH[1]}"
    else
        echo kernel
    fi
}

install_dnf() { # $1: NVIDIA repo folder for this OS (amzn2023, rhel8); $2: open | proprietary
    local repo="$1" flavour="$2" arch kernel release stream optional
    arch="$(uname -m)"
    [[ "$arch" == aarch64 ]] && arch=sbsa
    kernel="$(kernel_package)"
    release="$(uname -r)"
    # The module build needs the running kernel's devel package: that one must install.
    run dnf -y install "$kernel-devel-$release"
    # Headers and extras (NVIDIA's AL2023 pre-installation list) may not exist (Alinux 3 has no
    # kernel-modules-extra): one dnf call each, since one unknown name fails a whole call.
    for optional in "$kernel-headers-$release" "$kernel-modules-extra-$release" \
        "$kernel-modules-extra-common-$release"; do
        try dnf -y install "$optional"
    done
    run dnf config-manager --add-repo "$NVIDIA_REPOS/$repo/$arch/cuda-$repo.repo"
    run dnf clean expire-cache
    # NVIDIA's >= 570 recipe (Driver Installation Guide, "Kernel Modules", RHEL 8/9 and AL2023
    # rows): `module enable nvidia-driver:<branch>-open` + nvidia-open, or <branch>-dkms +
    # cuda-drivers. docs.nvidia.com/datacenter/tesla/driver-installation-guide/kernel-modules.html
    if [[ "$flavour" == open ]]; then
        stream="${ORCH_DNF_DRIVER_STREAM:-${ORCH_DRIVER_BRANCH}-open}"
        run dnf -y module enable "nvidia-driver:$stream"
        run dnf -y install nvidia-open
    else
        stream="${ORCH_DNF_DRIVER_STREAM:-${ORCH_DRIVER_BRANCH}-dkms}"
        run dnf -y module enable "nvidia-driver:$stream"
        run dnf -y install cuda-drivers
    fi
    if has_nvswitch; then
        run dnf -y install nvidia-fabric-manager
    fi
    if [[ "$ORCH_INSTALL_CUDA" == 1 ]]; then
        run dnf -y install cuda-toolkit
    fi
}

# ------------------------------------------------------------------------------- nouveau

nouveau_loaded() {
    [[ -d "$ORCH_ROOT/sys/module/nouveau" ]]
}

rebuild_initramfs() { # the blacklist must reach the initramfs, where nouveau loads early
    if command -v update-initramfs >/dev/null 2>&1; then
        try update-initramfs -u
    elif command -v dracut >/dev/null 2>&1; then
        try dracut --force
    fi
}

# While nouveau holds the GPU the NVIDIA module cannot load: unload it, else reboot once and
# resume from a oneshot unit. A second reboot is never tried.
release_gpu_from_nouveau() {
    nouveau_loaded || return 0
    log "nouveau holds the GPU: blacklisting it"
    mkdir -p "$MODPROBE_DIR"
    printf 'blacklist nouveau\noptions nouveau modeset=0\n' >"$MODPROBE_DIR/blacklist-nouveau.conf"
    try modprobe -r nouveau
    nouveau_loaded || return 0
    [[ ! -e "$REBOOTED" ]] || fail "nouveau still holds the GPU after a reboot (see $LOG)"
    rebuild_initramfs
    cp "${BASH_SOURCE[0]}" "$RESUME_SCRIPT"
    chmod 700 "$RESUME_SCRIPT"
    mkdir -p "$UNIT_DIR"
    cat >"$UNIT_DIR/$RESUME_UNIT" <<UNIT
[Unit]
Description=orch: finish the NVIDIA driver set-up after the nouveau reboot
After=network-online.target
Wants=network-online.target
ConditionPathExists=!/var/lib/orch/ready

[Service]
Type=oneshot
ExecStart=/bin/bash /var/lib/orch/install_drivers.sh

[Install]
WantedBy=multi-user.target
UNIT
    run systemctl daemon-reload
    run systemctl enable "$RESUME_UNIT"
    date -u +%Y-%m-%dT%H:%M:%SZ >"$REBOOTED"
    log "rebooting once to release the GPU from nouveau; $RESUME_UNIT resumes after it"
    run systemctl reboot
    exit 0
}

finish_resume() { # after the reboot: the resume unit has done its job
    if [[ -e "$UNIT_DIR/$RESUME_UNIT" ]]; then
        try systemctl disable "$RESUME_UNIT"
        rm -f "$UNIT_DIR/$RESUME_UNIT" "$RESUME_SCRIPT"
    fi
}

# ---------------------------------------------------------------------------------- main

main() {
    if [[ -e "$READY" ]]; then
        log "already set up ($READY exists): nothing to do"
        exit 0
    fi
    rm -f "$FAILED"
    log "start (cloud: ${ORCH_CLOUD:-unknown}, expires: ${ORCH_EXPIRES_AT:-never})"
    install_expiry

    [[ -r "$OS_RELEASE" ]] || fail "cannot read $OS_RELEASE"
    local os_id os_version gpus flavour ids
    read -r os_id os_version < <(read_os_release)
    gpus="$(count_gpus)"
    log "OS $os_id $os_version; $gpus NVIDIA GPU(s) on the PCI bus"
    [[ "$gpus" -gt 0 ]] || fail "no NVIDIA GPU on the PCI bus"

    if driver_works; then
        log "nvidia-smi works already (driver preinstalled): skipping the install"
    else
        [[ "$ORCH_DRIVER_FLAVOUR" =~ ^(open|proprietary|)$ ]] ||
            fail "ORCH_DRIVER_FLAVOUR '$ORCH_DRIVER_FLAVOUR' is not open or proprietary"
        mapfile -t ids < <(gpu_device_ids)
        flavour="$(choose_flavour "${ids[@]}")"
        log "GPU device id(s) ${ids[*]}: $flavour kernel modules, branch $ORCH_DRIVER_BRANCH"
        case "$os_id $os_version" in
            "ubuntu 22.04" | "ubuntu 24.04") install_ubuntu "$flavour" ;;
            "amzn 2023") install_dnf amzn2023 "$flavour" ;;
            "alinux 3"*) install_dnf rhel8 "$flavour" ;;
            *) fail "unsupported OS '$os_id $os_version' (Ubuntu 22.04/24.04, AL2023, Alinux 3)" ;;
        esac
        release_gpu_from_nouveau
        try modprobe nvidia
        if has_nvswitch; then
            try systemctl enable --now nvidia-fabricmanager
        fi
        driver_works || fail "driver installed but nvidia-smi does not work (see $LOG)"
    fi

    local driver
    driver="$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -n 1)"
    printf 'driver=%s\ngpus=%s\nos=%s %s\nat=%s\n' "$driver" "$gpus" "$os_id" "$os_version" \
        "$(date -u +%Y-%m-%dT%H:%M:%SZ)" >"$READY.tmp"
    mv "$READY.tmp" "$READY"
    finish_resume
    log "ready: driver $driver"
}

main "$@"
