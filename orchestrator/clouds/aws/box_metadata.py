"""EC2's instance metadata service as the box-side checkpoint agent reads it (IMDSv2).

orch writes this entry to metadata.json next to the agent (orchestrator/boxside/); the agent
and its S3 client (orchestrator/boxside/box_s3.py) ask it for spot notices, the instance
profile's role credentials and the region. Standard library only: JSON-serialisable values.

- IMDSv2: PUT /latest/api/token with X-aws-ec2-metadata-token-ttl-seconds (1-21600), then GETs
  with X-aws-ec2-metadata-token; 401 when the token is missing, invalid or expired.
  https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/instancedata-data-retrieval.html
- Spot notice: GET /latest/meta-data/spot/instance-action: 404 without a notice, 200
  {"action": "terminate"|"stop"|"hibernate", "time": "...Z"} with one (`notice_body`: "json").
  https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/spot-instance-termination-notices.html
- Rebalance recommendation: GET /latest/meta-data/events/recommendations/rebalance: 404 until
  EC2 sees the spot instance at elevated risk of interruption, then 200 {"noticeTime": "...Z"};
  it can come well before the two-minute notice, so the agent checkpoints at once.
  https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/rebalance-recommendations.html
- The instance profile's role credentials: /latest/meta-data/iam/security-credentials/ROLE
  (box_s3.py cites the references).
"""

from __future__ import annotations

BOX_METADATA: dict[str, object] = {
    "base": "http://169.254.169.254",
    "ttl_header": "X-aws-ec2-metadata-token-ttl-seconds",
    "token_header": "X-aws-ec2-metadata-token",
    "notice_path": "/latest/meta-data/spot/instance-action",
    "notice_body": "json",  # {"action", "time"}
    "rebalance_path": "/latest/meta-data/events/recommendations/rebalance",
    "credentials_path": "/latest/meta-data/iam/security-credentials/",
    "credential_keys": ["AccessKeyId", "SecretAccessKey", "Token"],
    "region_path": "/latest/meta-data/placement/region",
    # boto3's own credential chain reads the instance profile through IMDS: no provider needed.
    "sdk_finds_role": True,
}
