#!/bin/bash
# The default-recipe study (issue 69), in its own clone ($1, with `make run` done there):
# the committed params over 3 seeds (`lorasent seeds`, whose record is metrics/seeds.json),
# then each other candidate seed by seed, one run at a time on both cores, each the
# `dvc exp run --temp` that `lorasent sweep` runs in its clones, so that every run lands
# as it ends. Output in $2 (one log per run, drive.log); waits between runs while $2/PAUSE
# exists. A run already landed (`dvc exp list`) or in the study's record (runs.json,
# landed in an earlier sitting, perhaps on another machine) is not run again.
set -u
cd "$1" && export PATH=$PWD/.venv/bin:$PATH
log=$2
landed() {
  dvc exp list --name-only 2>/dev/null | grep -qx "$1" ||
    grep -q "\"experiment\": \"$1\"" docs/default-recipe-study/runs.json
}
step() {  # experiment name, then the command
  local name=$1 t0=$SECONDS; shift
  while [ -e "$log/PAUSE" ]; do sleep 20; done
  landed "$name" && return
  echo "$(date -u +%FT%TZ) start $name $*" >> "$log/drive.log"
  "$@" > "$log/$name.log" 2>&1
  local rc=$?
  [ $rc = 0 ] && echo "sweep: $name succeeded in $((SECONDS - t0)) s" >> "$log/$name.log"
  echo "$(date -u +%FT%TZ) end $name rc=$rc" >> "$log/drive.log"
}
if ! landed epochs2-seed44; then
  lorasent seeds -n 3 --name epochs2 > "$log/epochs2.log" 2>&1 && mv metrics/seeds.json "$log/"
fi
for seed in 42 43 44; do
  step epochs1-seed$seed dvc exp run --temp -n epochs1-seed$seed \
    -S train.num_train_epochs=1 -S base.seed=$seed
done
for seed in 42 43 44; do
  step rows3200-seed$seed dvc exp run --temp -n rows3200-seed$seed \
    -S split.train_size=3200 -S train.num_train_epochs=1 -S base.seed=$seed
done
for seed in 42 43 44; do
  step epochs3-seed$seed dvc exp run --temp -n epochs3-seed$seed \
    -S train.num_train_epochs=3 -S base.seed=$seed
done
echo "$(date -u +%FT%TZ) plan done" >> "$log/drive.log"
