#!/usr/bin/env bash
# Runs the cargo-fuzz (libFuzzer) targets in fuzz/ for a given time each.
#
#   bash scripts/fuzz.sh [SECONDS] [TARGET...]
#
# SECONDS defaults to 60; TARGETs default to all of fuzz/fuzz_targets/. Each
# target starts from its committed seeds (fuzz/seeds/TARGET) and the corpus
# grown by earlier runs (fuzz/corpus/TARGET, untracked), and uses
# fuzz/dicts/TARGET.dict when there is one. Prints per target the executions,
# exec/s, final coverage (cov/ft), corpus size and crashes; crash inputs land
# in fuzz/artifacts/TARGET/ and full logs in fuzz/runs/. Exits non-zero when
# any target crashed (or failed to build).
#
# Environment:
#   FUZZ_BUILD_FLAGS   extra `cargo fuzz build/run` flags, e.g. "--sanitizer none"
#   FUZZ_ARGS          extra libFuzzer flags, e.g. "-max_len=8192"
#   CARGO_TARGET_DIR   where the instrumented build goes [default: fuzz/target]
#
# Needs a nightly toolchain (cargo fuzz passes -Z flags); without one it
# falls back to stable with RUSTC_BOOTSTRAP=1. Installs cargo-fuzz if missing.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
FUZZ=$ROOT/fuzz

log() { echo "fuzz: $*" >&2; }
die() { log "$*"; exit 1; }

SECONDS_EACH=${1:-60}
[[ $SECONDS_EACH =~ ^[0-9]+$ ]] || die "SECONDS must be a whole number, got '$SECONDS_EACH'"
shift || true
if [ $# -gt 0 ]; then
    TARGETS=("$@")
else
    TARGETS=()
    for f in "$FUZZ"/fuzz_targets/*.rs; do TARGETS+=("$(basename "$f" .rs)"); done
fi
for t in "${TARGETS[@]}"; do
    [ -f "$FUZZ/fuzz_targets/$t.rs" ] || die "no target '$t' in fuzz/fuzz_targets/"
done

if ! cargo fuzz --version >/dev/null 2>&1; then
    log "installing cargo-fuzz"
    cargo install --locked cargo-fuzz
fi
if rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
    CARGO=(cargo +nightly)
else
    log "no nightly toolchain: using stable with RUSTC_BOOTSTRAP=1"
    export RUSTC_BOOTSTRAP=1
    CARGO=(cargo)
fi
read -r -a BUILD_FLAGS <<<"${FUZZ_BUILD_FLAGS:-}"
read -r -a EXTRA_ARGS <<<"${FUZZ_ARGS:-}"

cd "$FUZZ"
log "building ${TARGETS[*]} (the first build instruments wasmtime too: 15+ minutes)"
for t in "${TARGETS[@]}"; do
    "${CARGO[@]}" fuzz build "${BUILD_FLAGS[@]}" "$t"
done

mkdir -p runs
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
failed=0
summary=()
for t in "${TARGETS[@]}"; do
    corpus=$FUZZ/corpus/$t
    artifacts=$FUZZ/artifacts/$t
    mkdir -p "$corpus" "$artifacts"
    dict=()
    [ -f "$FUZZ/dicts/$t.dict" ] && dict=(-dict="$FUZZ/dicts/$t.dict")
    seeds=()
    [ -d "$FUZZ/seeds/$t" ] && seeds=("$FUZZ/seeds/$t")
    logf=$FUZZ/runs/$t-$STAMP.log
    before=$(find "$artifacts" -type f | wc -l)
    log "running $t for ${SECONDS_EACH}s (log: fuzz/runs/$(basename "$logf"))"
    set +e
    "${CARGO[@]}" fuzz run "${BUILD_FLAGS[@]}" "$t" "$corpus" "${seeds[@]}" -- \
        -max_total_time="$SECONDS_EACH" -timeout=10 -print_final_stats=1 \
        -artifact_prefix="$artifacts/" "${dict[@]}" "${EXTRA_ARGS[@]}" >"$logf" 2>&1
    rc=$?
    set -e
    after=$(find "$artifacts" -type f | wc -l)
    crashes=$((after - before))
    execs=$(awk '/stat::number_of_executed_units:/ {v = $2} END {print v}' "$logf")
    speed=$(awk '/stat::average_exec_per_sec:/ {v = $2} END {print v}' "$logf")
    # The last status line: "#N  DONE|REDUCE|...  cov: C ft: F corp: U/S ..."
    status=$(grep -E '^#[0-9]+' "$logf" | grep 'cov:' | tail -n 1 || true)
    cov=$(sed -nE 's/.* cov: ([0-9]+).*/\1/p' <<<"$status")
    ft=$(sed -nE 's/.* ft: ([0-9]+).*/\1/p' <<<"$status")
    corp=$(sed -nE 's/.* corp: ([0-9]+\/[0-9]+[a-zA-Z]*).*/\1/p' <<<"$status")
    if [ "$rc" -ne 0 ] && [ "$crashes" -eq 0 ]; then
        # libFuzzer failed without leaving an input (build or setup error).
        crashes="error (exit $rc)"
    fi
    if [ "$rc" -ne 0 ]; then
        failed=1
        log "$t FAILED; see fuzz/runs/$(basename "$logf")"
        grep -E 'panicked at|ERROR: (libFuzzer|AddressSanitizer)|^Test unit written' "$logf" | head -n 5 >&2 || true
    fi
    summary+=("$(printf '%-16s %12s %8s %6s %7s %12s  %s' "$t" "${execs:-?}" "${speed:-?}" \
        "${cov:-?}" "${ft:-?}" "${corp:-?}" "$crashes")")
done

printf '\n%-16s %12s %8s %6s %7s %12s  %s\n' target executions exec/s cov ft corpus crashes
printf '%s\n' "${summary[@]}"
exit "$failed"
