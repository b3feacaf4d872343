#!/usr/bin/env bash
# Submit an example job with plain spark-submit (no Spark Operator) to a Kubernetes cluster.
#
#   spark-jobs/k8s/spark-submit.sh iot-alerts          # streaming, runs until deleted
#   spark-jobs/k8s/spark-submit.sh daily-aggregates    # batch, once
#
# Needs: kubectl context pointing at the cluster, `kubectl apply -f spark-jobs/k8s/rbac.yaml -f
# spark-jobs/k8s/storage.yaml`, the image pushed (spark-jobs/Dockerfile), and a local
# spark-submit (e.g. `uv run spark-submit`, from the pyspark wheel). Override with env vars:
# K8S_API, NAMESPACE, IMAGE, STROM_BOOTSTRAP (a StromCluster's bootstrap Service).
set -euo pipefail

job="${1:-}"
K8S_API="${K8S_API:-$(kubectl config view --minify -o jsonpath='{.clusters[0].cluster.server}')}"
NAMESPACE="${NAMESPACE:-spark-jobs}"
IMAGE="${IMAGE:-ghcr.io/strom-dev/strom-spark:0.1.0}"
STROM_BOOTSTRAP="${STROM_BOOTSTRAP:-strom-bootstrap.strom.svc:9092}"

common=(
  --master "k8s://${K8S_API}"
  --deploy-mode cluster
  --conf "spark.kubernetes.namespace=${NAMESPACE}"
  --conf "spark.kubernetes.container.image=${IMAGE}"
  --conf "spark.kubernetes.authenticate.driver.serviceAccountName=spark"
  --conf "spark.executor.instances=2"
  --conf "spark.sql.session.timeZone=UTC"
)

mount() {  # mount PVC $1 at $2 on the driver and the executors
  local role
  for role in driver executor; do
    common+=(--conf "spark.kubernetes.${role}.volumes.persistentVolumeClaim.$1.options.claimName=$1"
             --conf "spark.kubernetes.${role}.volumes.persistentVolumeClaim.$1.mount.path=$2")
  done
}

case "${job}" in
  iot-alerts)
    mount strom-spark-checkpoints /checkpoints
    exec spark-submit "${common[@]}" --name iot-alerts \
      --conf spark.sql.shuffle.partitions=8 \
      local:///opt/strom/jobs/iot_alerts.py \
      --bootstrap "${STROM_BOOTSTRAP}" --readings-topic sensor-readings \
      --alerts-topic sensor-alerts --checkpoint /checkpoints/iot-alerts \
      --starting-offsets earliest --max-offsets-per-trigger 200000
    ;;
  daily-aggregates)
    mount strom-spark-output /output
    exec spark-submit "${common[@]}" --name daily-aggregates \
      local:///opt/strom/jobs/daily_aggregates.py \
      --bootstrap "${STROM_BOOTSTRAP}" --topic sensor-readings --value-field temperature \
      --min-partitions 8 --out /output/daily-aggregates
    ;;
  *)
    echo "usage: $0 iot-alerts|daily-aggregates" >&2
    exit 2
    ;;
esac
