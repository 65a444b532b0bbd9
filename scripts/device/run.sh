#!/usr/bin/env bash
# The device check on a GPU machine (no Node, no network): unpacks the archive scripts/device/pack.ts made
# (.device/onnxd-device.tar.xz, or $DEVICE_ARCHIVE) into $DEVICE_WORK (default ${TMPDIR:-/tmp}/onnxd-device) and runs
# its check (scripts/device/check.ts, transpiled) with the Node inside it: builds, greedy tokens on WebGPU against the
# CPU, the context sweep and the serving sweep on WebGPU, llama.cpp's Vulkan build beside it, each step under a
# timeout inside one budget (default 450 s). Writes OUT/device-check.json (OUT: the first argument, or $OUT), the
# benchmarks' reports in OUT/bench/ and each step's output in OUT/logs/.
#
#   scripts/device/run.sh [OUT] [--budget S] [--dry-run] [--from-tree]
#
# --dry-run: the tiny preset and the fewest, shortest steps (test/device/device-check.int.test.ts runs it here, on
# Mesa's lavapipe). --from-tree (or no archive): runs from this working tree with the Node on PATH and tsx instead.
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
out=""
tree=${DEVICE_FROM_TREE:-}
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --from-tree) tree=1 ;;
    --dry-run) args+=(--dry-run) ;;
    --budget) args+=(--budget "${2:?--budget needs seconds}"); shift ;;
    --budget=*) args+=(--budget "${1#--budget=}") ;;
    -*) echo "run.sh: unknown option $1" >&2; exit 2 ;;
    *) out=$1 ;;
  esac
  shift
done
out=${out:-${OUT:-}}
if [ -z "$out" ]; then
  echo "usage: scripts/device/run.sh OUT [--budget S] [--dry-run] [--from-tree]   (or OUT=DIR in the environment)" >&2
  exit 2
fi
mkdir -p "$out"
out=$(cd "$out" && pwd)
# NVIDIA's Vulkan driver (libGLX_nvidia) needs the Vulkan loader and glvnd's libGLdispatch, which a bare CUDA image
# may lack: Debian's libvulkan1 and libglvnd0 (.deb files in $DEVICE_GL, default .gl/ beside the archive: see
# docs/runtimes-and-gpus.md, "The device check") are unpacked into / when missing, and Vulkan is pointed at NVIDIA's
# ICD where it is mounted (found on the project's GPU machines: without both, Dawn reports "No supported adapters").
gl=${DEVICE_GL:-$root/.gl}
if ! ldconfig -p 2>/dev/null | grep -q 'libGLdispatch.so.0' || ! ldconfig -p 2>/dev/null | grep -q 'libvulkan.so.1'; then
  if ls "$gl"/*.deb >/dev/null 2>&1 && [ "$(id -u)" -eq 0 ]; then
    for f in "$gl"/*.deb; do dpkg -x "$f" / || echo "run.sh: could not unpack $f" >&2; done
    ldconfig
  fi
fi
nvidia_icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
if [ -z "${VK_DRIVER_FILES:-}" ] && [ -f "$nvidia_icd" ]; then export VK_DRIVER_FILES=$nvidia_icd; fi
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp}

archive=${DEVICE_ARCHIVE:-$root/.device/onnxd-device.tar.xz}
work=${DEVICE_WORK:-${TMPDIR:-/tmp}/onnxd-device}
mkdir -p "$work"

if [ -z "$tree" ] && [ -f "$archive" ]; then
  t0=$(date +%s%N)
  rm -rf "$work/onnxd-device"
  if ! tar -xJf "$archive" -C "$work" 2>"$out/unpack.log"; then
    # No Node to write the report with: a minimal one by hand.
    printf '{"kind":"onnxd-device-check","schema":1,"finished":false,"steps":[{"name":"unpack","status":"failed","error":"tar -xJf %s failed; see unpack.log"}]}\n' "$archive" >"$out/device-check.json"
    echo "run.sh: could not unpack $archive (see $out/unpack.log)" >&2
    exit 1
  fi
  unpack=$(( ($(date +%s%N) - t0) / 1000000 ))
  app="$work/onnxd-device/app"
  exec "$work/onnxd-device/node/bin/node" "$app/scripts/device/check.mjs" --app "$app" --mode dist --out "$out" --work "$work" \
    --unpack-seconds "$(printf '%d.%03d' $((unpack / 1000)) $((unpack % 1000)))" ${args[@]+"${args[@]}"}
fi

[ -n "$tree" ] || echo "run.sh: no archive at $archive: running from the working tree $root" >&2
node=$(command -v node) || { echo "run.sh: no node on PATH (and no archive)" >&2; exit 1; }
cd "$root"
exec "$node" --import tsx scripts/device/check.ts --app "$root" --mode src --out "$out" --work "$work" ${args[@]+"${args[@]}"}
