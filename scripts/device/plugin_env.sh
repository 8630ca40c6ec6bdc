# Sourced by the device scripts (gpu_suite.sh, parallel.sh, issue11_12.sh) from the repo root: the SGLang
# bundle (`.device/env.sh`, when carried) and the plugin's real entry point visible to every SGLang process,
# through a dist-info on PYTHONPATH (what `pip install` of the wheel would write), with the checkout's
# python/ importable.
if [ -f .device/env.sh ]; then
  # shellcheck disable=SC1091
  source .device/env.sh
fi
_ddt_ep=/tmp/ddt_ep/sglang_ddtree-0.1.0.dist-info
mkdir -p "$_ddt_ep"
printf 'Metadata-Version: 2.1\nName: sglang_ddtree\nVersion: 0.1.0\n' > "$_ddt_ep/METADATA"
printf '[sglang.srt.plugins]\nddtree = sglang_ddtree.plugin:register\n' > "$_ddt_ep/entry_points.txt"
export PYTHONPATH=/tmp/ddt_ep:$PWD/python:${PYTHONPATH:-}
export PYTHONUNBUFFERED=1
