#!/bin/sh
# Entrypoint of the sglang-ddtree image.
#
#   docker run IMAGE --model-path T --speculative-algorithm DDTREE ...
#       arguments that start with "-" are server flags: this runs
#       python3 -m sglang.launch_server --host 0.0.0.0 --port ${PORT:-30000} <your flags>
#       (--host/--port come first, so a --host or --port of yours wins: argparse keeps the last one)
#   docker run IMAGE python3 -m sglang_ddtree doctor
#       anything else is run as given (doctor, a shell, a benchmark)
#
# Listening on 0.0.0.0 is what makes `-p 30000:30000` reach the server; SGLang's own default,
# 127.0.0.1, is unreachable from outside the container. PORT also tells the HEALTHCHECK where to look.
set -e
if [ "$#" -eq 0 ] || [ "${1#-}" != "$1" ]; then
    exec python3 -m sglang.launch_server --host 0.0.0.0 --port "${PORT:-30000}" "$@"
fi
exec "$@"
