"""Serve a local cloud emulator: `python -m tests.sim aliyun --port 8950`.

Then point the SDKs and the test provider at it:

    export ALIBABA_CLOUD_ENDPOINT_ECS=http://127.0.0.1:8950
    export ALIBABA_CLOUD_ENDPOINT_VPC=http://127.0.0.1:8950
    export ALIBABA_CLOUD_ENDPOINT_RAM=http://127.0.0.1:8950
    export ALIBABA_CLOUD_ACCESS_KEY_ID=test ALIBABA_CLOUD_ACCESS_KEY_SECRET=test
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.sim", description=__doc__.splitlines()[0]
    )
    parser.add_argument("cloud", choices=["aliyun"], help="which emulator to serve")
    parser.add_argument("--port", type=int, default=8950, help="TCP port on 127.0.0.1 (0: any)")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--launch-delay", type=float, help="seconds an instance stays Pending")
    parser.add_argument(
        "--frozen-clock",
        action="store_true",
        help="start with time standing still (advance it: POST /_sim/clock)",
    )
    parser.add_argument("--verbose", action="store_true", help="log every request")
    args = parser.parse_args(argv)

    from tests.sim.aliyun.server import EmulatorServer

    server = EmulatorServer(args.port, host=args.host, verbose=args.verbose)
    if args.launch_delay is not None:
        server.backend.settings.launch_delay_s = args.launch_delay
    if args.frozen_clock:
        server.backend.freeze_clock()
    print(f"aliyun emulator (ECS + VPC) listening on {server.endpoint}", flush=True)
    print(f"  export ALIBABA_CLOUD_ENDPOINT_ECS={server.endpoint}", flush=True)
    print(f"  export ALIBABA_CLOUD_ENDPOINT_VPC={server.endpoint}", flush=True)
    print(f"  export ALIBABA_CLOUD_ENDPOINT_RAM={server.endpoint}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
