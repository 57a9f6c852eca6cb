set -u
cd /work/main
eval "$(harness/env.sh)"
for u in root; do
  podman info --format 'root driver {{.Store.GraphDriverName}}'
  for i in 1 2 3; do c=$(podman --runtime scrun run -d localhost/busybox sleep 1); sleep 0.5; python3 -c "import json; d=json.load(open('/run/user/0/scrun/$c/state.json')); print('root busybox stage-in', round(d['phases']['stage-in']*1000))"; podman wait $c >/dev/null; podman rm $c >/dev/null; done
done
ls /tmp/scrun-cluster/shared/0/scrun-cache/layers 2>&1 | head -3
U="runuser -u scruntest2 -- env -i HOME=/home/scruntest2 USER=scruntest2 LOGNAME=scruntest2 PATH=/work/main/.venv/bin:/usr/local/bin:/usr/bin:/bin XDG_RUNTIME_DIR=/run/user/1001 SLURM_CONF=$SLURM_CONF"
$U podman info --format 'rootless driver {{.Store.GraphDriverName}}'
for mode in "" "--userns=keep-id" "" "--userns=keep-id" "--user 1001:1001"; do $U podman --runtime scrun run --rm $mode localhost/busybox sh -c 'id -u; echo hi >/tmp/x; cat /tmp/x' | tr '\n' ' '; echo "[$mode] rc=$?"; done
ls -la /tmp/scrun-cluster/shared/1001/scrun-cache/layers 2>&1 | head -5
ls /tmp/scrun-cluster/shared/1001/scrun-cache/ | grep -vc lock
