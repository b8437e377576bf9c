"""ECS's instance metadata service as the box-side checkpoint agent reads it.

orch writes this entry to metadata.json next to the agent (orchestrator/boxside/); the agent
and its S3 client (orchestrator/boxside/box_s3.py) ask it for spot notices, the instance RAM
role's STS credentials and the region. Standard library only: JSON-serialisable values.

- orch's boxes allow metadata only in security hardening mode (http_tokens = "required"), whose
  token comes from PUT /latest/api/token with X-aliyun-ecs-metadata-token-ttl-seconds (1-21600)
  and goes in X-aliyun-ecs-metadata-token.
  https://www.alibabacloud.com/help/en/ecs/user-guide/view-instance-metadata
- Spot notice: GET /latest/meta-data/instance/spot/termination-time: 404 while the instance is
  not being reclaimed, 200 with a UTC time ("2015-01-05T18:02:00Z") once it is
  (`notice_body`: "time"). Alibaba Cloud has no rebalance recommendation.
  https://www.alibabacloud.com/help/en/ecs/user-guide/best-practices-for-preemptible-instances
- The instance RAM role's STS credentials: /latest/meta-data/ram/security-credentials/ROLE.
  boto3 does not know this service, so the agent hands boto3 a provider for them.
"""

from __future__ import annotations

BOX_METADATA: dict[str, object] = {
    "base": "http://100.100.100.200",
    "ttl_header": "X-aliyun-ecs-metadata-token-ttl-seconds",
    "token_header": "X-aliyun-ecs-metadata-token",
    "notice_path": "/latest/meta-data/instance/spot/termination-time",
    "notice_body": "time",  # the body is the reclaim time; ECS releases the instance
    "credentials_path": "/latest/meta-data/ram/security-credentials/",
    "credential_keys": ["AccessKeyId", "AccessKeySecret", "SecurityToken"],
    "region_path": "/latest/meta-data/region-id",
}
