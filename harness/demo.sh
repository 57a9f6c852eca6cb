#!/usr/bin/env bash
# harness/demo.sh -- placeholder demo (the podman -> scrun demo replaces it): one
# container through the private cluster with Slurm's own --container (oci.conf -> crun).
# Expects the exports of harness/env.sh (make demo loads them).
set -euo pipefail
: "${SCRUN_TEST_BUNDLE:?run through make demo, or eval \"\$(make -s env)\" first}"
say() { printf '\n\033[1m$ %s\033[0m\n' "$*"; }

say sinfo
sinfo

say "srun --container $SCRUN_TEST_BUNDLE busybox echo hello from Slurm"
srun --container "$SCRUN_TEST_BUNDLE" busybox echo hello from Slurm

say "srun -J demo --container $SCRUN_TEST_BUNDLE sh -c 'sleep 3; echo done' &   # then squeue"
srun -J demo --container "$SCRUN_TEST_BUNDLE" sh -c 'echo "inside job $SLURM_JOB_ID"; sleep 3; echo done' &
srun_pid=$!
sleep 1
squeue -o '%.8i %.10P %.10j %.8u %.4t %.8M %N'
job="$(squeue -h -n demo -o %i | head -1)"
[ -z "$job" ] || { say "scontrol show job $job"; scontrol show job "$job" | grep -E 'JobId|JobState|NodeList|Container' || true; }
wait "$srun_pid"
