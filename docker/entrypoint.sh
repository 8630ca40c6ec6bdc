#!/bin/sh
# Entrypoint of the sglang-ddtree image.
#
#   docker run IMAGE --model-path T --speculative-algorithm DDTREE ...
#       arguments that start with "-" are server flags: this runs the doctor, then
#       python3 -m sglang.launch_server --host 0.0.0.0 --port ${PORT:-30000} <your flags>
#       (--host/--port come first, so a --host or --port of yours wins: argparse keeps the last one)
#   docker run IMAGE python3 -m sglang_ddtree doctor
#       anything else is run as given (doctor, a shell, a benchmark), without the start-up doctor
#
# Start-up doctor (`python3 -m sglang_ddtree doctor`, now with the GPU: its architecture and the attention
# backends DDTREE can use there), chosen by SGLANG_DDTREE_DOCTOR:
#   fail (default)  a failed required check stops the container (exit 1) with the doctor's table and fixes
#   warn            the table is printed and the server starts anyway
#   off             no doctor
# `--help` alone skips it (nothing is served).
# Listening on 0.0.0.0 is what makes `-p 30000:30000` reach the server; SGLang's own default,
# 127.0.0.1, is unreachable from outside the container. PORT also tells the HEALTHCHECK where to look.
set -e
if [ "$#" -eq 0 ] || [ "${1#-}" != "$1" ]; then
    mode=${SGLANG_DDTREE_DOCTOR:-fail}
    case "$mode" in
        fail|warn|off) ;;
        *) echo "sglang-ddtree entrypoint: SGLANG_DDTREE_DOCTOR=$mode: use fail, warn or off" >&2; exit 2 ;;
    esac
    if [ "$mode" != off ] && [ "$*" != "--help" ] && [ "$#" -gt 0 ]; then
        rc=0
        python3 -m sglang_ddtree doctor || rc=$?
        if [ "$rc" -ne 0 ]; then
            if [ "$mode" = fail ]; then
                echo "sglang-ddtree entrypoint: the doctor found a failed required check (exit $rc); not starting" \
                     "the server. Fix it, or set SGLANG_DDTREE_DOCTOR=warn to start anyway." >&2
                exit 1
            fi
            echo "sglang-ddtree entrypoint: doctor exit $rc; starting anyway (SGLANG_DDTREE_DOCTOR=warn)" >&2
        fi
    fi
    exec python3 -m sglang.launch_server --host 0.0.0.0 --port "${PORT:-30000}" "$@"
fi
exec "$@"
