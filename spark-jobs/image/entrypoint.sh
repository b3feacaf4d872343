#!/usr/bin/env bash
# The Spark image's pod entrypoint (Strom's own; the upstream image's script is not used).
#
# Spark's Kubernetes scheduler starts every pod of a job from the same image with one argument
# that says its role, and passes the rest in environment variables it sets on the pod:
#
#   driver ARGS...   spark-submit in client mode inside the driver pod (the pod IS the driver);
#                    ARGS are what spark-submit --deploy-mode cluster put in the pod spec
#                    (--properties-file, --class, the application and its arguments)
#   executor         the executor JVM (KubernetesExecutorBackend) that registers with the driver
#                    at $SPARK_DRIVER_URL, with the ID, cores, memory and pod name Spark chose
#   anything else    run as given (e.g. `python3`, `bash`) for debugging
#
# Every role runs under tini (PID 1 reaps zombies and forwards SIGTERM, so a deleted pod stops
# its JVM within terminationGracePeriodSeconds).
set -euo pipefail

: "${SPARK_HOME:?SPARK_HOME is not set in the image}"
JAVA="${JAVA_HOME:+$JAVA_HOME/bin/}java"

# Spark and the JVM look the user up (Hadoop's UserGroupInformation); with an arbitrary UID
# (OpenShift-style runAsUser) there is no passwd entry: add one when /etc/passwd is writable.
if ! getent passwd "$(id -u)" >/dev/null 2>&1 && [ -w /etc/passwd ]; then
    echo "$(id -u):x:$(id -u):$(id -g):${SPARK_USER_NAME:-spark}:${SPARK_HOME}:/bin/false" \
        >>/etc/passwd
fi

# Class path: configuration first (SPARK_CONF_DIR, where spark-submit mounts the job's
# spark.properties ConfigMap), then Spark's jars, then any extra the pod spec adds.
classpath="${SPARK_CONF_DIR:-$SPARK_HOME/conf}:${SPARK_HOME}/jars/*"
[ -n "${SPARK_EXTRA_CLASSPATH:-}" ] && classpath="${classpath}:${SPARK_EXTRA_CLASSPATH}"
[ -n "${SPARK_DIST_CLASSPATH:-}" ] && classpath="${classpath}:${SPARK_DIST_CLASSPATH}"

role="${1:-}"
case "$role" in
    driver)
        shift
        : "${SPARK_DRIVER_BIND_ADDRESS:?the driver pod has no SPARK_DRIVER_BIND_ADDRESS}"
        cmd=("$SPARK_HOME/bin/spark-submit" --deploy-mode client
             --conf "spark.driver.bindAddress=${SPARK_DRIVER_BIND_ADDRESS}" "$@")
        ;;
    executor)
        shift
        for var in SPARK_DRIVER_URL SPARK_EXECUTOR_ID SPARK_EXECUTOR_CORES SPARK_EXECUTOR_MEMORY \
                   SPARK_APPLICATION_ID SPARK_EXECUTOR_POD_IP SPARK_EXECUTOR_POD_NAME; do
            [ -n "${!var:-}" ] || { echo "entrypoint: the executor pod has no $var" >&2; exit 2; }
        done
        # The driver passes JVM options as SPARK_JAVA_OPT_0, SPARK_JAVA_OPT_1, ... (in order).
        java_opts=()
        while IFS='=' read -r name _; do
            java_opts+=("${!name}")
        done < <(env | grep -o '^SPARK_JAVA_OPT_[0-9]*=' | sort -t_ -k4 -n)
        cmd=("$JAVA" ${java_opts[@]+"${java_opts[@]}"}
             "-Xms${SPARK_EXECUTOR_MEMORY}" "-Xmx${SPARK_EXECUTOR_MEMORY}"
             -cp "$classpath"
             org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend
             --driver-url "$SPARK_DRIVER_URL" --executor-id "$SPARK_EXECUTOR_ID"
             --cores "$SPARK_EXECUTOR_CORES" --app-id "$SPARK_APPLICATION_ID"
             --hostname "$SPARK_EXECUTOR_POD_IP"
             --resourceProfileId "${SPARK_RESOURCE_PROFILE_ID:-0}"
             --podName "$SPARK_EXECUTOR_POD_NAME")
        ;;
    "")
        echo "entrypoint: give a role (driver or executor) or a command" >&2
        exit 2
        ;;
    *)
        cmd=("$@")
        ;;
esac
exec /usr/bin/tini -s -- "${cmd[@]}"
