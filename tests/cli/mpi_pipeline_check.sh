#!/usr/bin/env bash
# Pipeline parallelism over MPI (issue 18 item 1): `mpirun -np N strata logits|run|bench ...
# --mpi-pipeline` (rank r runs a contiguous range of layers) writes logits and greedy tokens
# byte-identical to one process, at np 2 (the CED boundary) and np 3 (balanced cuts, and declared
# --mpi-pipeline-cuts with an injected latency), on the v41-tiny fixture and on a synthesized demo
# checkpoint. A bad cut, serve, --spec, bench --parallel and --mpi together are refused with the
# reason; a stage that stops answering ends the run with an error naming its rank (no hang), and a
# killed stage ends the job.
# Usage: mpi_pipeline_check.sh STRATA FIXTURES_DIR SOURCE_DIR. Exit 77 (skip) when mpirun is missing
# or strata was built without MPI.
set -uo pipefail
strata="$1"; fixtures="$2"; source_dir="$3"
source "$(dirname "$0")/mpi_lib.sh"
mpi_setup --mpi-pipeline
ftoks="$fixtures/v41-tiny/tokens.json"

# same NAME OUT: OUT's logits, decode logits and greedy tokens equal NAME-one's byte for byte.
same() {
  cmp -s "$tmp/$1-one.f32" "$tmp/$2.f32" && cmp -s "$tmp/$1-one.dec.f32" "$tmp/$2.dec.f32" &&
    cmp -s "$tmp/$1-one.tok" "$tmp/$2.tok"
}
for i in "${!dirs[@]}"; do
  dir="${dirs[$i]}"; toks="${tokens[$i]}"; name="$(basename "$dir")"
  launch=()
  if ! mpi_logits "$name-one"; then echo "FAIL $name: one process:"; cat "$tmp/$name-one.err"; fail=1; continue; fi
  # 3 ranks on 2 cores: waiting ranks sleep at once (--mpi-spin-us 0).
  cases=("2|" "3|--mpi-spin-us 0")
  [[ $name == checkpoint ]] && cases+=("3|--mpi-spin-us 0 --mpi-pipeline-cuts 1,4 --mpi-inject-latency-us 300")
  for case in "${cases[@]}"; do
    np="${case%%|*}"; flags=(${case#*|}); out="$name-np$np-$(tr -cd '0-9' <<< "${case#*|}")"
    launch=("${mpi[@]}" -np "$np")
    if ! mpi_logits "$out" --mpi-pipeline "${flags[@]}"; then echo "FAIL $out: mpirun failed:"; cat "$tmp/$out.err"; fail=1; continue; fi
    if same "$name" "$out"; then
      echo "ok   $name np $np ${case#*|}: byte-identical to one process ($(grep -m1 -- '--mpi-pipeline:' "$tmp/$out.err" | cut -c 25-))"
    else
      echo "FAIL $name np $np ${case#*|}: outputs differ from one process"; fail=1
    fi
  done
done

# strata run --mpi-pipeline at np 2: the answer of one process (greedy, and sampled with a seed).
dir="${dirs[-1]}"; name="$(basename "$dir")"
for temp in 0 0.8; do
  args=(run -m "$dir" -p "The quick brown fox jumps over the lazy dog. Tell me more." -n 12 --temp "$temp" --seed 7 -t 1)
  timeout 300 "$strata" "${args[@]}" > "$tmp/run-one.txt" 2>/dev/null
  if ! timeout 300 "${mpi[@]}" -np 2 "$strata" "${args[@]}" --mpi-pipeline > "$tmp/run-np2.txt" 2>"$tmp/run-np2.err"; then
    echo "FAIL $name run --temp $temp: mpirun failed:"; cat "$tmp/run-np2.err"; fail=1
  elif [[ -s "$tmp/run-one.txt" ]] && cmp -s "$tmp/run-one.txt" "$tmp/run-np2.txt"; then
    echo "ok   $name run --temp $temp: np 2 prints the answer of one process"
  else
    echo "FAIL $name run --temp $temp: answers differ (or are empty)"; fail=1
  fi
done

# bench --mpi-pipeline at np 2 on the fixture: cold and warm runs (every run a fresh session, so
# a fresh mirror on the stage); the report records the ranks.
if timeout 300 "${mpi[@]}" -np 2 "$strata" bench -m "$ck" --prompt 16 --gen 4 --reps 1 --warmup 0 -t 1 --no-plan \
    --mpi-pipeline --json "$tmp/bench.json" > "$tmp/bench.out" 2> "$tmp/bench.err" &&
  grep -q -- "--mpi-pipeline over 2 ranks" "$tmp/bench.out" &&
  python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); assert j["options"]["mpi_ranks"] == 2, j["options"]' "$tmp/bench.json"; then
  echo "ok   bench --mpi-pipeline at np 2: $(grep -m1 -E '^ +warm' "$tmp/bench.out" | tr -s ' ')"
else
  echo "FAIL bench --mpi-pipeline:"; cat "$tmp/bench.out" "$tmp/bench.err"; fail=1
fi

# Refused, with the reason: a cut that a cache crosses (names the layer), fewer than 2 ranks, and
# what needs more than one mirrored sequence or the last layers on rank 0 (usage errors, exit 2).
refused() {  # refused WHAT EXPECTED_RC PATTERN CMD...
  local what="$1" want="$2" pattern="$3"; shift 3
  timeout 120 "$@" > /dev/null 2> "$tmp/refused.err"
  local rc=$?
  if [[ $rc -ne 0 && ( $want == any || $rc -eq $want ) ]] && grep -q -- "$pattern" "$tmp/refused.err"; then
    echo "ok   refused $what (exit $rc): $(grep -m1 -- "$pattern" "$tmp/refused.err" | cut -c 1-150)"
  else
    echo "FAIL $what: exit $rc, expected $want and '$pattern':"; cat "$tmp/refused.err"; fail=1
  fi
}
refused "a cut at layer 3" 2 "layer 3 reads the compressed KV of layer 2, before the cut at 3" \
  "${mpi[@]}" -np 3 "$strata" logits -m "$ck" --tokens "$ftoks" --out "$tmp/x.f32" -t 1 --mpi-pipeline --mpi-pipeline-cuts 1,3
# Rank 0 alone prints an error the ranks agreed on (the others end quietly).
if [[ $(grep -c "before the cut at 3" "$tmp/refused.err") -ne 1 ]]; then
  echo "FAIL the cut error is printed $(grep -c "before the cut at 3" "$tmp/refused.err") times, expected once:"
  cat "$tmp/refused.err"; fail=1
fi
refused "2 cuts at np 2" 2 "2 cuts for 2 ranks: expected 1" \
  "${mpi[@]}" -np 2 "$strata" logits -m "$ck" --tokens "$ftoks" --out "$tmp/x.f32" -t 1 --mpi-pipeline --mpi-pipeline-cuts 1,5
for bad in "1,,4" "4," ",4" "" "-1" "4x"; do
  refused "--mpi-pipeline-cuts '$bad'" 2 "expected layer numbers separated by commas" \
    "$strata" logits -m "$ck" --tokens "$ftoks" --out "$tmp/x.f32" --mpi-pipeline --mpi-pipeline-cuts "$bad"
done
refused "np 1" any "needs at least 2 ranks" "${mpi[@]}" -np 1 "$strata" logits -m "$ck" --tokens "$ftoks" --out "$tmp/x.f32" --mpi-pipeline
refused "--mpi with --mpi-pipeline" 2 "do not combine" "$strata" logits -m "$ck" --tokens "$ftoks" --out "$tmp/x.f32" --mpi --mpi-pipeline
refused "serve" 2 "does not support serve" "$strata" serve -m "$ck" --mpi-pipeline
refused "run --spec dspark" 2 "does not support --spec dspark" "$strata" run -m "$ck" -p hi --spec dspark --mpi-pipeline
refused "run --spec draft" 2 "does not support --spec draft (verification rewinds" \
  "$strata" run -m "$ck" -p hi --spec draft --draft-model "$ck" --mpi-pipeline
refused "bench --parallel" 2 "does not support --parallel" "$strata" bench -m "$ck" --parallel 2 --no-plan --mpi-pipeline

# A stage that cannot load its layers (rank 1 is given a checkpoint that does not exist): rank 0
# prints that stage's own error (mpirun may end rank 1 before it prints anything itself).
cat > "$tmp/badload.sh" <<SH
#!/usr/bin/env bash
if [[ "\${OMPI_COMM_WORLD_RANK:-0}" == 1 ]]; then
  args=(); for a in "\$@"; do [[ "\$a" == "$ck" ]] && a="$tmp/no-such-checkpoint"; args+=("\$a"); done
  exec "$strata" "\${args[@]}"
fi
exec "$strata" "\$@"
SH
chmod +x "$tmp/badload.sh"
refused "a stage that cannot load" 1 "MPI rank 1 (pipeline stage, layers 5-7) could not load its layers: .*no-such-checkpoint" \
  "${mpi[@]}" -np 2 "$tmp/badload.sh" logits -m "$ck" --tokens "$ftoks" --out "$tmp/x.f32" -t 1 --mpi-pipeline

# A stage that stops answering: rank R is stopped (SIGSTOP) 6 s after it starts, while rank 0 is
# decoding; rank 0 waits --mpi-timeout 3 s for the forward, names the first rank that did not pass
# it on, and aborts the job. At np 3 rank 1 is stopped, so rank 2 never gets the forward either:
# the error must still name rank 1 (on a loaded machine the stop can come while the ranks still load:
# rank 0 then names rank 1 for not reporting its layers loaded, the same words up to "3 s").
# A killed stage (SIGKILL): mpirun ends the job naming it.
stall() {  # stall NP RANK SIGNAL PATTERN
  local np="$1" rank="$2" sig="$3" pattern="$4"
  cat > "$tmp/stall.sh" <<SH
#!/usr/bin/env bash
[[ "\${OMPI_COMM_WORLD_RANK:-0}" == $rank ]] && { (sleep 6; kill -$sig \$\$) & }
exec "$strata" "\$@"
SH
  chmod +x "$tmp/stall.sh"
  local t0=$SECONDS
  timeout 120 "${mpi[@]}" -np "$np" "$tmp/stall.sh" logits -m "$ck" --tokens "$ftoks" --out "$tmp/stall.f32" \
    --decode 1000000 -t 1 --mpi-pipeline --mpi-spin-us 0 --mpi-timeout 3 > /dev/null 2>"$tmp/stall.err"
  local rc=$? took=$((SECONDS - t0))
  if [[ $rc -eq 0 ]]; then
    echo "FAIL np $np rank $rank SIG$sig: the run succeeded"; fail=1
  elif [[ $rc -eq 124 || $took -ge 60 ]]; then
    echo "FAIL np $np rank $rank SIG$sig: the job hung ($took s, exit $rc):"; cat "$tmp/stall.err"; fail=1
  elif grep -q -- "$pattern" "$tmp/stall.err"; then
    echo "ok   np $np rank $rank SIG$sig: exit $rc after $took s: $(grep -m1 -- "$pattern" "$tmp/stall.err" | cut -c 1-160)"
  else
    echo "FAIL np $np rank $rank SIG$sig: no error matching '$pattern':"; cat "$tmp/stall.err"; fail=1
  fi
}
stall 2 1 STOP "MPI rank 1 (pipeline stage, layers 5-7) did not answer within 3 s"
stall 3 1 STOP "MPI rank 1 (pipeline stage, layers 2-4) did not answer within 3 s"
stall 2 1 KILL "rank 1 .*signal 9"
exit $fail
