#!/usr/bin/env bash
# harness/demo.sh -- a container through podman -> scrun -> Slurm on the private cluster.
# Expects the exports of harness/env.sh (make demo loads them).
set -euo pipefail
: "${CONTAINERS_CONF:?run through make demo, or eval \"\$(make -s env)\" first}"
say() { printf '\n\033[1m$ %s\033[0m\n' "$*"; }

say sinfo
sinfo

say "podman --runtime scrun run --rm localhost/busybox echo hello from a Slurm job"
podman --runtime scrun run --rm localhost/busybox echo hello from a Slurm job

say "podman --runtime scrun run --rm localhost/busybox sh -c 'echo job \$SLURM_JOB_ID, step \$SLURM_STEP_ID; exit 3'; echo exit code \$?"
rc=0
podman --runtime scrun run --rm localhost/busybox \
  sh -c 'echo "job $SLURM_JOB_ID, step $SLURM_STEP_ID"; exit 3' 2>/dev/null || rc=$?
echo "exit code $rc"

say "podman --runtime scrun run --rm -e SCRUN_GPUS=1 localhost/busybox sh -c 'ls /dev/nvidia*; echo \"CUDA_VISIBLE_DEVICES=\$CUDA_VISIBLE_DEVICES on \$FAKE_GPU_NODE\"'   # its GPU (fake ones: harness/README.md)"
podman --runtime scrun run --rm -e SCRUN_GPUS=1 localhost/busybox \
  sh -c 'ls /dev/nvidia*; echo "CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES on $FAKE_GPU_NODE"' || true

say "podman --runtime scrun run -d --name scrun-demo -e SCRUN_PARTITION=second -e SCRUN_JOB_NAME=demo localhost/busybox sh -c 'trap \"exit 0\" TERM; sleep 30 & wait'"
podman rm -f scrun-demo >/dev/null 2>&1 || true
podman --runtime scrun run -d --name scrun-demo -e SCRUN_PARTITION=second -e SCRUN_JOB_NAME=demo \
  localhost/busybox sh -c 'trap "exit 0" TERM; sleep 30 & wait' >/dev/null
say "squeue   # the container is a Slurm job"
squeue -o '%.8i %.10P %.10j %.8u %.4t %.8M %N %k'
job="$(squeue -h -n demo -o %i | head -1)"
[ -z "$job" ] || { say "scontrol show job $job"; scontrol show job "$job" | grep -E 'JobId|JobState|Partition|NodeList|Comment'; }
say "podman stop -t 2 scrun-demo && podman rm scrun-demo"
podman stop -t 2 scrun-demo >/dev/null && podman rm scrun-demo >/dev/null
say "squeue   # nothing left"
squeue

say "sacct -X -S now-10minutes -o JobID,JobName,Partition,State,ExitCode,NodeList   # the records in slurmdbd"
sleep 1   # slurmctld sends a job's end to slurmdbd shortly after it ends
sacct -X -S now-10minutes -o JobID,JobName,Partition,State,ExitCode,NodeList | tail -5

say "ls $SCRUN_SHARED_DIR/0/scrun/   # each container was staged here (scrun.lua) and removed after"
ls -A "$SCRUN_SHARED_DIR/0/scrun/"

if [ -n "${SCRUN_TEST_USER:-}" ]; then
  say "su - $SCRUN_TEST_USER -c 'podman --runtime scrun run --rm localhost/busybox sh -c \"echo job \$SLURM_JOB_ID\"'   # rootless podman, an ordinary user"
  out="$(su - "$SCRUN_TEST_USER" -c "podman --runtime scrun run --rm localhost/busybox sh -c 'echo job \$SLURM_JOB_ID'" 2>/dev/null)"
  echo "$out"
  job="${out#job }"
  say "scontrol show job $job | grep UserId   # the job is the user's"
  scontrol show job "$job" | grep -o 'UserId=[^ ]*'
fi
