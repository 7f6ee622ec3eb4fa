#!/bin/sh
# Container entrypoint: gives each process its own OpenTelemetry service.instance.id, then execs
# the command (so the binary is PID 1 and receives SIGTERM itself).
#
# Why: the collector's Prometheus exporter keys series by job (service.name) + instance
# (service.instance.id). Without a distinct instance, two worker replicas would publish the same
# series and overwrite each other's counters. The container hostname (the container id under
# Docker, the pod name under Kubernetes) is unique per replica. An id already present in
# OTEL_RESOURCE_ATTRIBUTES is left alone.
set -eu

case ",${OTEL_RESOURCE_ATTRIBUTES:-}," in
    *,service.instance.id=*) ;;
    *)
        # HOSTNAME comes from the container runtime (Docker and Kubernetes set it), not the shell.
        # shellcheck disable=SC3028
        instance="${HOSTNAME:-$(cat /proc/sys/kernel/hostname)}"
        OTEL_RESOURCE_ATTRIBUTES="${OTEL_RESOURCE_ATTRIBUTES:+${OTEL_RESOURCE_ATTRIBUTES},}service.instance.id=${instance}"
        export OTEL_RESOURCE_ATTRIBUTES
        ;;
esac

# `docker run IMAGE --listen ...` means the gateway with those flags.
if [ "$#" -eq 0 ] || [ "${1#-}" != "$1" ]; then
    set -- gateway "$@"
fi

exec "$@"
