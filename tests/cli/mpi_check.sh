#!/usr/bin/env bash
# Expert parallelism over MPI (issue 18): `mpirun -np N strata logits ... --mpi` on one machine
# writes logits and greedy tokens byte-identical to one process, at np 2 and 3, on the v41-tiny
# fixture and on a synthesized demo checkpoint, with the ranks in resident and in stream placement,
# with weighted partitions (--mpi-weights) and with an injected latency (--mpi-inject-latency-us).
# A rank that cannot answer ends the run with an error naming the rank (no hang). `bench --mpi`
# runs at np 2 and records the ranks.
# Usage: mpi_check.sh STRATA FIXTURES_DIR SOURCE_DIR. Exit 77 (skip) when mpirun is missing or
# strata was built without MPI; scripts/install-deps.sh installs OpenMPI, so CI runs it.
set -uo pipefail
strata="$1"; fixtures="$2"; source_dir="$3"
source "$(dirname "$0")/mpi_lib.sh"
mpi_setup --mpi

for i in "${!dirs[@]}"; do
  dir="${dirs[$i]}"; toks="${tokens[$i]}"; name="$(basename "$dir")"
  launch=()
  if ! mpi_logits "$name-one" --load-mode resident; then echo "FAIL $name: one process:"; cat "$tmp/$name-one.err"; fail=1; continue; fi
  for np in 2 3; do
    for mode in resident stream; do
      out="$name-np$np-$mode"
      launch=("${mpi[@]}" -np "$np")
      # 3 ranks on a 2-core machine: waiting ranks sleep at once (--mpi-spin-us 0) instead of
      # taking the core from a computing one.
      spin=(); [[ $np -eq 3 ]] && spin=(--mpi-spin-us 0)
      if ! mpi_logits "$out" --mpi --load-mode "$mode" "${spin[@]}"; then
        echo "FAIL $out: mpirun failed:"; cat "$tmp/$out.err"; fail=1; continue
      fi
      if cmp -s "$tmp/$name-one.f32" "$tmp/$out.f32" && cmp -s "$tmp/$name-one.dec.f32" "$tmp/$out.dec.f32" &&
         cmp -s "$tmp/$name-one.tok" "$tmp/$out.tok"; then
        echo "ok   $out: logits and greedy tokens byte-identical to one process"
      else
        echo "FAIL $out: outputs differ from one process"; fail=1
      fi
    done
  done
done

# Weighted partitions (--mpi-weights; default: each rank's MemAvailable) and an injected latency
# (--mpi-inject-latency-us, the bench's stand-in for netem) leave the logits byte-identical.
for i in "${!dirs[@]}"; do
  dir="${dirs[$i]}"; toks="${tokens[$i]}"; name="$(basename "$dir")"
  for case in "2|--mpi-weights 1,3" "3|--mpi-weights 3,0,1 --mpi-spin-us 0" "2|--mpi-weights 2,1 --mpi-inject-latency-us 300"; do
    np="${case%%|*}"; flags=(${case#*|}); out="$name-np$np-w$(tr -cd '0-9' <<< "${case#*|}")"
    if ! timeout 300 "${mpi[@]}" -np "$np" "$strata" logits -m "$dir" --tokens "$toks" --out "$tmp/$out.f32" \
        --decode 5 --decode-logits "$tmp/$out.dec.f32" -t 1 --load-mode resident --mpi "${flags[@]}" \
        >"$tmp/$out.tok" 2>"$tmp/$out.err"; then
      echo "FAIL $out: mpirun failed:"; cat "$tmp/$out.err"; fail=1; continue
    fi
    if cmp -s "$tmp/$name-one.f32" "$tmp/$out.f32" && cmp -s "$tmp/$name-one.dec.f32" "$tmp/$out.dec.f32" &&
       cmp -s "$tmp/$name-one.tok" "$tmp/$out.tok"; then
      echo "ok   $out (np $np ${case#*|}): logits and greedy tokens byte-identical to one process"
    else
      echo "FAIL $out (np $np ${case#*|}): outputs differ from one process"; fail=1
    fi
  done
done
# Weights that do not match the ranks: every rank ends with the error, no hang.
if timeout 120 "${mpi[@]}" -np 2 "$strata" logits -m "$ck" --tokens "$fixtures/v41-tiny/tokens.json" \
    --out "$tmp/badw.f32" -t 1 --mpi --mpi-weights 1,2,3 > /dev/null 2>"$tmp/badw.err"; then
  echo "FAIL --mpi-weights 1,2,3 at np 2: the run succeeded"; fail=1
elif grep -q "gives 3 weights for 2 ranks" "$tmp/badw.err"; then
  echo "ok   --mpi-weights 1,2,3 at np 2: $(grep -m1 'gives 3 weights' "$tmp/badw.err")"
else
  echo "FAIL --mpi-weights 1,2,3 at np 2: no error naming the weights:"; cat "$tmp/badw.err"; fail=1
fi

# A list with an empty item is a usage error before MPI starts (not read as 2,1).
timeout 60 "$strata" logits -m "$ck" --tokens "$fixtures/v41-tiny/tokens.json" --out "$tmp/badw.f32" --mpi \
  --mpi-weights 2,1, > /dev/null 2>"$tmp/badw.err"
rc=$?
if [[ $rc -eq 2 ]] && grep -q "item 3 is empty" "$tmp/badw.err"; then
  echo "ok   --mpi-weights 2,1, refused: $(head -1 "$tmp/badw.err")"
else
  echo "FAIL --mpi-weights 2,1,: exit $rc, expected 2 naming the empty item:"; cat "$tmp/badw.err"; fail=1
fi

# strata run --mpi: the same answer as one process (greedy and sampled with a seed).
for dir in "${dirs[@]}"; do
  name="$(basename "$dir")"
  for temp in 0 0.8; do
    args=(run -m "$dir" -p "The quick brown fox jumps over the lazy dog. Tell me more." -n 12 --temp "$temp" --seed 7 -t 1)
    timeout 300 "$strata" "${args[@]}" > "$tmp/run-one.txt" 2>/dev/null
    if ! timeout 300 "${mpi[@]}" -np 3 "$strata" "${args[@]}" --mpi --mpi-spin-us 0 > "$tmp/run-np3.txt" 2>"$tmp/run-np3.err"; then
      echo "FAIL $name run --temp $temp: mpirun failed:"; cat "$tmp/run-np3.err"; fail=1
    elif [[ -s "$tmp/run-one.txt" ]] && cmp -s "$tmp/run-one.txt" "$tmp/run-np3.txt"; then
      echo "ok   $name run --temp $temp: np 3 prints the answer of one process"
    else
      echo "FAIL $name run --temp $temp: answers differ (or are empty)"; fail=1
    fi
  done
done

# strata serve --mpi: a greedy chat completion answers as a one-process server does (on a synthesized
# tiny checkpoint: serve needs the V4.1 chat tokens, which the fixture's tokenizer lacks).
"$strata" synth --preset tiny --out "$tmp/tiny" > /dev/null 2>&1 || { echo "FAIL synth --preset tiny"; fail=1; }
serve_answer() {  # serve_answer OUT [launcher...]: starts the server, asks once, stops it
  local out="$1"; shift
  local port=$((20000 + RANDOM % 20000))
  "$@" "$strata" serve -m "$tmp/tiny" --port "$port" -t 1 ${MPI_FLAG:-} > "$tmp/$out.log" 2>&1 &
  local pid=$!
  for _ in $(seq 300); do
    grep -q "ready in" "$tmp/$out.log" 2>/dev/null && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  curl -s -m 60 "http://127.0.0.1:$port/v1/chat/completions" -H 'Content-Type: application/json' \
    -d '{"model":"deepseek-v4.1-flash","messages":[{"role":"user","content":"Hello there"}],"max_tokens":8,"temperature":0}' \
    | python3 -c 'import json,sys; m=json.load(sys.stdin)["choices"][0]["message"]; print(json.dumps([m.get("reasoning_content"), m.get("content")]))' > "$tmp/$out.txt" 2>/dev/null
  kill -TERM "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
}
serve_answer serve-one
MPI_FLAG=--mpi serve_answer serve-np2 "${mpi[@]}" -np 2
if grep -q '[A-Za-z]' "$tmp/serve-one.txt" 2>/dev/null && cmp -s "$tmp/serve-one.txt" "$tmp/serve-np2.txt"; then
  echo "ok   serve --mpi: np 2 answers as one process: $(head -c 60 "$tmp/serve-one.txt")"
else
  echo "FAIL serve --mpi: answers differ or are empty"; tail -5 "$tmp/serve-np2.log"; fail=1
fi

# A rank that does not answer in time: the run fails naming the rank, it does not hang. Rank 1 is
# stopped (SIGSTOP) 2 s after it starts, while rank 0 is decoding; rank 0 waits --mpi-timeout 3 s for
# its answer, reports the rank and aborts the job (MPI_Abort), which ends the stopped rank too.
stall="$tmp/stall.sh"
cat > "$stall" <<SH
#!/usr/bin/env bash
[[ "\${OMPI_COMM_WORLD_RANK:-0}" == 1 ]] && { (sleep 2; kill -STOP \$\$) & }
exec "$strata" "\$@"
SH
chmod +x "$stall"
t0=$SECONDS
timeout 120 "${mpi[@]}" -np 2 "$stall" logits -m "$ck" --tokens "$fixtures/v41-tiny/tokens.json" \
    --out "$tmp/stall.f32" --decode 1000000 -t 1 --mpi --mpi-timeout 3 > /dev/null 2>"$tmp/stall.err"
rc=$?
took=$((SECONDS - t0))
if [[ $rc -eq 0 ]]; then
  echo "FAIL stalled rank: the run succeeded"; fail=1
elif [[ $rc -eq 124 || $took -ge 60 ]]; then
  echo "FAIL stalled rank: the job hung ($took s, exit $rc):"; cat "$tmp/stall.err"; fail=1
elif grep -q "MPI rank 1 .*did not answer within" "$tmp/stall.err"; then
  echo "ok   stalled rank: exit $rc after $took s, error names rank 1: $(grep -m1 'strata: error' "$tmp/stall.err")"
else
  echo "FAIL stalled rank: no error naming rank 1:"; cat "$tmp/stall.err"; fail=1
fi
# bench --mpi at np 2 on the fixture: cold and warm runs and two batched streams through the peers;
# the report records the ranks.
if timeout 300 "${mpi[@]}" -np 2 "$strata" bench -m "$ck" --prompt 16 --gen 4 --reps 1 --warmup 0 -t 1 --no-plan \
    --parallel 2 --mpi --json "$tmp/bench.json" > "$tmp/bench.out" 2> "$tmp/bench.err" &&
  grep -q -- "--mpi over 2 ranks" "$tmp/bench.out" &&
  python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); assert j["options"]["mpi_ranks"] == 2, j["options"]' "$tmp/bench.json"; then
  echo "ok   bench --mpi at np 2: $(grep -m1 -E '^ +warm' "$tmp/bench.out" | tr -s ' ')"
else
  echo "FAIL bench --mpi:"; cat "$tmp/bench.out" "$tmp/bench.err"; fail=1
fi
# A rank that dies (SIGKILL) mid-run: mpirun ends the job and names the rank; no hang.
sed 's/kill -STOP/kill -KILL/' "$stall" > "$tmp/kill.sh"; chmod +x "$tmp/kill.sh"
t0=$SECONDS
timeout 120 "${mpi[@]}" -np 2 "$tmp/kill.sh" logits -m "$ck" --tokens "$fixtures/v41-tiny/tokens.json" \
    --out "$tmp/kill.f32" --decode 1000000 -t 1 --mpi > /dev/null 2>"$tmp/kill.err"
rc=$?
took=$((SECONDS - t0))
if [[ $rc -eq 0 || $rc -eq 124 || $took -ge 60 ]]; then
  echo "FAIL killed rank: exit $rc after $took s"; cat "$tmp/kill.err"; fail=1
elif grep -q "rank 1 .*signal 9" "$tmp/kill.err"; then
  echo "ok   killed rank: exit $rc after $took s, mpirun names rank 1"
else
  echo "FAIL killed rank: no message naming rank 1:"; cat "$tmp/kill.err"; fail=1
fi
exit $fail
