"""Command line: ``python -m sglang_ddtree {doctor,demo,wait-healthy}``.

``doctor`` checks that this machine can serve DDTREE (see ``sglang_ddtree.doctor``); ``demo`` runs
the reference DDTree round loop on CPU and checks it against the target's own greedy output;
``wait-healthy`` waits until a server serves, or reports why its process died
(``sglang_ddtree.wait_healthy``).
"""

import argparse
import sys

DESCRIPTION = ("sglang-ddtree's commands: doctor checks that this machine can serve DDTREE; demo runs the reference "
               "DDTree round loop on CPU and checks it against the target's own greedy output; wait-healthy waits "
               "until a server serves, or reports why its process died.")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sglang_ddtree", description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("doctor", help="check the environment a DDTREE deployment needs", add_help=False)
    sub.add_parser("demo", help="run the reference DDTree loop on CPU and check losslessness", add_help=False)
    sub.add_parser("wait-healthy", help="wait until a server serves; on its death show its log's tail and the cause",
                   add_help=False)
    args, rest = parser.parse_known_args(argv)
    if args.command == "doctor":
        from sglang_ddtree.doctor import main as doctor_main

        return doctor_main(rest)
    if args.command == "wait-healthy":
        from sglang_ddtree.wait_healthy import main as wait_healthy_main

        return wait_healthy_main(rest)
    from sglang_ddtree.demo import main as demo_main

    return demo_main(rest)


if __name__ == "__main__":
    sys.exit(main())
