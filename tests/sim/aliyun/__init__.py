"""An in-memory emulator of the Alibaba Cloud ECS (2014-05-26) and VPC (2016-04-28) RPC APIs.

Laid out like moto: `data.py` (static catalogue: regions, zones, instance types, images,
prices), `models/` (state and rules) and `responses/` (RPC parameter parsing and response
shapes), one module per resource family in each, `server.py` (HTTP). See tests/sim/README.md.
"""
