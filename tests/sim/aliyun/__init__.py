"""An in-memory emulator of the Alibaba Cloud ECS (2014-05-26) and VPC (2016-04-28) RPC APIs.

Laid out like moto: `data.py` (static catalogue: regions, zones, instance types, images,
prices), `models.py` (state and rules), `responses.py` (RPC parameter parsing and response
shapes), `server.py` (HTTP). See tests/sim/README.md.
"""
