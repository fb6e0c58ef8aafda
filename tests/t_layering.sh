#!/bin/bash
# Dependencies flow one way: server -> engine -> {probe, kernels}.
#   kernels/  includes only kernels/
#   probe/    includes only probe/
#   engine/   includes engine/, probe/, kernels/
#   server/   includes anything of ours
# Every include of a project header names its folder from the repository
# root ("engine/engine.h"), and the build has one -I. for them. The checker
# is also run on a small tree with an upward include, which it must refuse.
cd "$(dirname "$0")/.."
check() { # NAME STATUS DETAIL
    if [ "$2" = 0 ]; then echo "ok - $1"; else echo "not ok - $1: $3"; fi
}

# Prints "file: include" for each include that breaks the rules in tree $1.
violations() {
    local root=$1 f inc dir top
    while IFS= read -r f; do
        dir=${f#"$root"/}
        top=${dir%%/*}
        while IFS= read -r inc; do
            case "$inc" in
                engine/* | kernels/* | probe/* | server/* | tests/*) ;;
                *) echo "$dir: \"$inc\" does not name its folder"; continue ;;
            esac
            case "$top:${inc%%/*}" in
                kernels:kernels | probe:probe | engine:engine | engine:probe | engine:kernels | server:*) ;;
                *) echo "$dir: \"$inc\" crosses upward" ;;
            esac
        done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f")
    done < <(find "$root/engine" "$root/kernels" "$root/probe" "$root/server" -type f \
                  \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) 2>/dev/null | sort)
}

out=$(violations .)
check "no include crosses upward or leaves out its folder (server -> engine -> probe, kernels)" "$([ -z "$out" ]; echo $?)" "$out"

out=$(grep -rn '#include "' tests --include='*.c' --include='*.h' | grep -v '#include "\(engine\|kernels\|probe\|server\|tests\)/')
check "the tests' includes name their folder too" "$([ -z "$out" ]; echo $?)" "$out"

flags=$(grep -hoE -- '-I[^ ]+' Makefile kernels/cuda/cuda.mk tests/fuzz/fuzz.mk | sort -u | tr '\n' ' ')
check "one include path, the repository root (-I.)" "$([ "$flags" = "-I. " ]; echo $?)" "$flags"

t=$(mktemp -d)
mkdir -p "$t/engine" "$t/kernels/cpu" "$t/probe" "$t/server"
printf '#include "engine/log.h"\n' > "$t/kernels/cpu/bad.c"
printf '#include "kernels/quant.h"\n' > "$t/probe/bad.h"
printf '#include "gguf.h"\n#include "probe/mask.h"\n' > "$t/engine/ok.c"
printf '#include "engine/engine.h"\n' > "$t/server/ok.c"
out=$(violations "$t")
rm -rf "$t"
n=$(grep -c . <<<"$out")
check "the checker refuses kernels -> engine, probe -> kernels and a bare name (3 of 3)" "$([ "$n" = 3 ]; echo $?)" "$out"
