#!/bin/bash
# Packs what scripts/make/gpu-check.sh needs on a GPU machine that cannot
# build ilpd: the lent GPU machines have the CUDA toolkit but not the headers
# of libmicrohttpd, cJSON or libb64, and no package access. Run here (where
# nvcc matches the GPU machine's CUDA); it builds, then fills .gpu-bin/
# (git-ignored) with
#   ilpd, build/rel/tests/test_cuda, build/rel/tests/test_cuda_emu  (under the same paths)
#   lib/       the shared libraries ldd names, except the C and C++ runtimes
#              and CUDA's own (the GPU machine has those)
#   shared/    ../shared/models/stories260K, the CUDA tests' real model
# (the binaries without their debug information) and checks that it fits,
# with the tracked files, the 64 MiB a device call carries. Then, on the GPU
# machine (device `run` with carry [".gpu-bin"]):
#   bash scripts/make/gpu-check.sh      (it finds .gpu-bin and skips the build)
# Environment: JOBS (2), SHARED (../shared).
set -eu
cd "$(dirname "$0")/../.." || exit 1
out=.gpu-bin
make -j"${JOBS:-2}" >/dev/null
make -j"${JOBS:-2}" build/rel/tests/test_cuda build/rel/tests/test_cuda_emu >/dev/null
if [ ! -f build/rel/kernels/cuda/cuda_backend.o ]; then
    echo "gpu-pack: the CUDA backend was not built: is nvcc installed (PATH or /usr/local/cuda/bin)?" >&2
    exit 1
fi
bins="ilpd build/rel/tests/test_cuda build/rel/tests/test_cuda_emu"
rm -rf "$out"
mkdir -p "$out/lib" "$out/build/rel/tests"
for b in $bins; do
    cp -p "$b" "$out/$b"
    strip --strip-debug "$out/$b" # symbols stay (backtraces); the DWARF would not fit
done
# shellcheck disable=SC2086 # the list splits into the binaries
for lib in $(ldd $bins | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u); do
    case "$(basename "$lib")" in
    libc.so* | libm.so* | libstdc++.so* | libgcc_s.so* | libpthread.so* | libdl.so* | librt.so* | ld-linux*) ;;
    libcuda.so* | libcudart.so* | libcublas.so* | libcublasLt.so* | libnvidia*) ;;
    *) cp -L "$lib" "$out/lib/" ;;
    esac
done
shared="${SHARED:-../shared}"
if [ -d "$shared/models/stories260K" ]; then
    mkdir -p "$out/shared/models"
    cp -r "$shared/models/stories260K" "$out/shared/models/"
else
    echo "gpu-pack: no $shared/models/stories260K: the CUDA tests will use synthetic models only"
fi
kib=$(du -sk "$out" | cut -f1)
tree=$(git ls-files -z | du -ck --files0-from=- | tail -n 1 | cut -f1)
echo "gpu-pack: $out holds $((kib / 1024)) MiB ($(find "$out/lib" -type f | wc -l) libraries, $bins);" \
    "with the tracked files $(((kib + tree) / 1024)) MiB"
if [ $((kib + tree)) -gt $((60 * 1024)) ]; then
    echo "gpu-pack: over 60 MiB: a device call carries 64 MiB with the working tree" >&2
    exit 1
fi
