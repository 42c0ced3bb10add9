#!/bin/bash
# The default-recipe study (issue 59): one factor at a time from the default, seed 42,
# one run at a time on both cores. Waits between runs while PAUSE exists.
cd /work/study
run() {  # name, then -S args
  local name=$1; shift
  while [ -e /work/study-logs/PAUSE ]; do sleep 20; done
  echo "$(date -u +%FT%TZ) start $name $*" >> /work/study-logs/drive.log
  /usr/bin/time -v .venv/bin/lorasent sweep --seeds 1 --cpus-per-run 2 --name "$name" "$@" \
      > /work/study-logs/$name.log 2>&1
  echo "$(date -u +%FT%TZ) end $name rc=$?" >> /work/study-logs/drive.log
}
while read -r name args; do
  [ -z "$name" ] && continue
  run $name $args
done < /work/study-logs/plan.txt
echo "$(date -u +%FT%TZ) plan done" >> /work/study-logs/drive.log
