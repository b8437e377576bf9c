"""Plugin entry point: Terraform starts this (through the mirror's wrapper script).

Two departures from `tf.runner.run_provider`'s defaults, both to behave like a Go provider:

* SIGINT is ignored. Ctrl-C in a terminal reaches the whole process group; go-plugin servers
  swallow it and let Terraform core decide (it sends StopProvider, then waits for operations in
  flight). A Python provider that died on SIGINT would lose the instance it was creating.
* StopProvider does not tear the gRPC server down mid-call (tf's default interceptor stops the
  server with grace=0, aborting in-flight ApplyResourceChange calls, so Terraform would never
  learn the id of an instance RunInstances had already created). Operations in flight finish;
  the plugin exits when Terraform shuts the plugin down (GRPCController.Shutdown) or kills it.

One fix to `tf`'s wire decoding: cty's msgpack encoding marks an unknown value with extension
type 0, or 12 when Terraform (1.6+) attaches refinements such as "not null" (a conditional
whose branches are both known strings, during validation). `tf` only recognises type 0, so a
refined unknown reached the schema checks as an ExtType and failed them. Both mean Unknown
(go-cty cty/msgpack/unknown.go: unknownValExt = 0, unknownValWithRefinementsExt = 12).
"""

from __future__ import annotations

import signal
import sys


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    from msgpack.ext import ExtType
    from tf import runner, utils
    from tf.types import Unknown

    def ext_hook(code: int, data: bytes) -> object:
        return Unknown if code in (0, 12) else ExtType(code, data)

    utils._msgpack_ext_hook = ext_hook

    class _FinishInFlightInterceptor(runner._ShutdownInterceptor):
        def intercept_service(self, continuation, handler_call_details):
            if handler_call_details.method == "/tfplugin6.Provider/StopProvider":
                return continuation(handler_call_details)
            return super().intercept_service(continuation, handler_call_details)

    runner._ShutdownInterceptor = _FinishInFlightInterceptor

    from tests.sim.alicloud_provider.provider import AlicloudProvider

    runner.run_provider(AlicloudProvider(), sys.argv)


if __name__ == "__main__":
    main()
