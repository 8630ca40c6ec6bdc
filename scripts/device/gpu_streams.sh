#!/usr/bin/env bash
# Several gpu_suite.sh streams at once (the GPU tests mostly wait on engine starts, so a few streams
# share one H200 well; with N GPUs, spread them). Each argument is one stream:
#     GPU:FILE[@K][,FILE[@K]...]      e.g.  0:test/worker/test_sampling_gpu.py,test/worker/test_features_gpu.py
# Streams start STAGGER_S (15) seconds apart (engine ports are picked at start) and each is killed after
# STREAM_TIMEOUT_S (560). Files in $OUT: s<i>.tar per stream (see gpu_suite.sh), streams.log.
# Device tool: carry [".device"]; command `bash scripts/device/gpu_streams.sh ARGS...`.
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/gpu_streams_out}
mkdir -p "$OUT"
i=0
pids=()
for stream in "$@"; do
  i=$((i + 1))
  gpu=${stream%%:*}
  files=${stream#*:}
  # shellcheck disable=SC2086
  (CUDA_VISIBLE_DEVICES=$gpu SUITE=s$i timeout -k 10 "${STREAM_TIMEOUT_S:-560}" \
     bash scripts/device/gpu_suite.sh ${files//,/ } 2>&1 | sed "s/^/[gpu$gpu] /") &
  pids+=($!)
  sleep "${STAGGER_S:-15}"
done
for p in "${pids[@]}"; do wait "$p"; done
echo "all streams done"
