# Step 6 of scripts/k8s-check.sh (sourced; its functions and variables): autoscaling on the
# sessions metric through Prometheus and KEDA, under streaming clients, with no session lost.
#
#   - Prometheus (built from the Go module proxy: Debian's lacks Kubernetes discovery) on the
#     host, discovering the pods through its Kubernetes service discovery against the
#     check's API server, scraping their metrics port every 5 s;
#   - KEDA (scripts/k8s/keda-install.sh) in the cluster; the cpu-demo-keda overlay applied over
#     the running cpu-demo (scripts/k8s/overlay-keda: the check's own values, below), so
#     KEDA takes the HPA orpheus-svc over and serves it the query's value as an External metric;
#   - out: 8 clients (two groups, A of 3 and B of 5, over dns:/// channels opened before the
#     scale-out) push open calls to 8 on 2 pods: over the target of 3 a pod, the HPA asks for
#     ceil(8 / 3) = 3; the new pod becomes Ready through the gRPC probe and gets sessions from
#     the existing channels once their connections reach server.max_connection_age_seconds;
#   - in: group B stops, A goes on (3 open calls: ceil(3 / 3) = 1, held at minReplicas 2); after
#     the scale-down window the HPA removes a pod, which drains while A's sessions run.
# Every session of both groups must end whole (scripts/k8s/k8s_sessions.py's rule), on its pod
# or resumed on another.
#
# The check's values differ from the shipped overlay's in two places, to fit the check's time:
# the scale-down stabilisation window (45 s instead of 600 s) and KEDA's polling interval (5 s
# instead of 15 s). Everything else (threshold, min/max, the query, the scale-up behaviour, the
# server's connection age and drain) is cpu-demo-keda's.
source scripts/k8s/keda-install.sh

t_step=${SECONDS}
keda_install "${KEDA_DIR}"
record "KEDA ${KEDA_VERSION} (${KEDA_BUILD_NOTE}): operator and metrics server Ready, APIService v1beta1.external.metrics.k8s.io Available, ${KEDA_S} s"

# Prometheus on the host: the pods' metrics port (named "metrics") of the Deployment's pods,
# labelled namespace and pod as a PodMonitor or the usual relabelling would
PROM_PORT="$(free_port)"
PROM="http://127.0.0.1:${PROM_PORT}"
mkdir -p "${WORK}/prometheus"
cat >"${WORK}/prometheus/prometheus.yml" <<EOF
global: {scrape_interval: 5s, evaluation_interval: 5s}
scrape_configs:
  - job_name: orpheus-svc
    kubernetes_sd_configs:
      - role: pod
        api_server: ${API}
        namespaces: {names: [default]}
        authorization: {credentials: ${TOKEN}}
        tls_config: {ca_file: ${PKI}/ca.crt}
    relabel_configs:
      - {source_labels: [__meta_kubernetes_pod_label_app_kubernetes_io_name], regex: orpheus-svc, action: keep}
      - {source_labels: [__meta_kubernetes_pod_container_port_name], regex: metrics, action: keep}
      - {source_labels: [__meta_kubernetes_namespace], target_label: namespace}
      - {source_labels: [__meta_kubernetes_pod_name], target_label: pod}
EOF
start prometheus "${PROM_BIN}" --config.file "${WORK}/prometheus/prometheus.yml" \
  --storage.tsdb.path "${WORK}/prometheus/data" --storage.tsdb.retention.time 2h \
  --web.listen-address "127.0.0.1:${PROM_PORT}"
prom_query() {  # QUERY -> the first result's value (empty when none)
  curl -fsS --max-time 5 "${PROM}/api/v1/query" --data-urlencode "query=$1" \
    | "${DEV_PY}" -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; print(r[0]["value"][1] if r else "")'
}
two_ready_idle() {  # the Deployment settled at 2 pods (the rollout's eviction replaced)
  [[ "$(ready_pods | wc -l)" == 2 \
     && -z "$(k get pods -l "${SEL}" -o jsonpath='{range .items[*]}{.metadata.deletionTimestamp}{end}')" ]]
}
wait_for 180 "two pods Ready and none terminating before the scale step" two_ready_idle
prom_up() { [[ "$(prom_query 'count(up{job="orpheus-svc"} == 1)')" == 2 ]]; }
wait_for 60 "Prometheus scraping both pods" prom_up
record "Prometheus $("${PROM_BIN}" --version 2>&1 | sed -n 's/^prometheus, version \([^ ]*\).*/\1/p') on the host: both pods discovered (kubernetes_sd, role pod) and scraped every 5 s"

# cpu-demo-keda over the running cpu-demo, as docs/deploy.md tells a user to
kustomize build scripts/k8s/overlay-keda \
  | sed "s#serverAddress: http://prometheus.monitoring.svc:9090#serverAddress: ${PROM}#" >"${WORK}/deploy-keda.yaml"
grep -q "serverAddress: ${PROM}" "${WORK}/deploy-keda.yaml" || die "the KEDA overlay has no serverAddress to point at ${PROM}"
k apply -f "${WORK}/deploy-keda.yaml" >"${WORK}/logs/apply-keda.log"
hpa_field() { k get hpa orpheus-svc -o jsonpath="$1" 2>/dev/null; }
keda_owns_hpa() {
  [[ "$(hpa_field '{.metadata.ownerReferences[0].kind}')" == ScaledObject \
     && "$(hpa_field '{.status.conditions[?(@.type=="ScalingActive")].status}')" == True ]]
}
wait_for 120 "KEDA owning the HPA orpheus-svc and the HPA reading its metric" keda_owns_hpa
METRIC="$(hpa_field '{.spec.metrics[0].external.metric.name}')"
record "cpu-demo-keda applied over cpu-demo: KEDA took the HPA orpheus-svc over (owner ScaledObject orpheus-svc), metric External ${METRIC} (target averageValue $(hpa_field '{.spec.metrics[0].external.target.averageValue}')), ScalingActive True; served by KEDA: $(k get --raw "/apis/external.metrics.k8s.io/v1beta1/namespaces/default/${METRIC}?labelSelector=scaledobject.keda.sh%2Fname%3Dorpheus-svc" | "${DEV_PY}" -c 'import json,sys; print(json.load(sys.stdin)["items"][0]["value"])') open calls with no load"

# the clients: channels opened now, before the scale-out, and kept to the end
dns_stand_in
"${DEV_PY}" scripts/k8s/scale_watch.py --kubeconfig "${KC}" --out "${WORK}/logs/scale-watch.jsonl" \
  >"${WORK}/logs/scale-watch.log" 2>&1 &
WATCH_PID=$!
t0=${SECONDS}
date +%s.%N >"${WORK}/scale.load-start"
# gRPC's own minimum time between DNS resolutions (30 s), as a real client has
"${DEV_PY}" scripts/k8s/rollout_clients.py --target "${TARGET}" --clients 3 --dns-min-resolution-ms 30000 \
  --stop-file "${WORK}/scale-a.stop" --out "${WORK}/logs/scale-a.json" >"${WORK}/logs/scale-a.log" 2>&1 &
CLIENTS_PID=$!
"${DEV_PY}" scripts/k8s/rollout_clients.py --target "${TARGET}" --clients 5 --first-client 3 \
  --dns-min-resolution-ms 30000 --stop-file "${WORK}/scale-b.stop" --out "${WORK}/logs/scale-b.json" >"${WORK}/logs/scale-b.log" 2>&1 &
CLIENTS_B_PID=$!
hpa_desired_at_least() { [[ "$(hpa_field '{.status.desiredReplicas}')" -ge "$1" ]]; }
wait_for 240 "the HPA asking for 3 pods" hpa_desired_at_least 3
OUT_ASKED_S=$((SECONDS - t0))
wait_for 300 "a third pod Ready" n_ready 3
OUT_READY_S=$((SECONDS - t0))
for p in $(ready_pods); do  # every pod's log to its end (the one scaled in: its drain)
  k logs -f "${p}" >"${WORK}/logs/scale-${p}.log" 2>&1 &
  LOGF_PIDS+=($!)
done
say "3 pods Ready ${OUT_READY_S} s after the load began (asked for at ${OUT_ASKED_S} s); waiting for the new pod's first session"
new_pod_served() { "${DEV_PY}" scripts/k8s/scale_report.py --new-pod-served "${WORK}/logs/scale-watch.jsonl"; }
wait_for 300 "a session on the new pod from the existing channels" new_pod_served
sleep 10  # a few more sessions on three pods
date +%s.%N >"${WORK}/scale.unload"
touch "${WORK}/scale-b.stop"  # its clients end their sessions in progress, then stop
t1=${SECONDS}
wait "${CLIENTS_B_PID}" || true
CLIENTS_B_PID=""
say "group B stopped $((SECONDS - t1)) s after it was told to; group A (3 clients) goes on through the scale-in"
hpa_desired_is() { [[ "$(hpa_field '{.status.desiredReplicas}')" == "$1" ]]; }
wait_for 300 "the HPA asking for 2 pods again" hpa_desired_is 2
say "the HPA asks for 2 pods, $((SECONDS - t1)) s after group B was told to stop"
wait_for 300 "the Deployment back at 2 pods, the removed one gone" two_ready_idle
sleep 5
touch "${WORK}/scale-a.stop"
wait "${CLIENTS_PID}" || true
CLIENTS_PID=""
kill "${WATCH_PID}" 2>/dev/null; wait "${WATCH_PID}" 2>/dev/null || true
WATCH_PID=""
PER_POD="$(curl -fsS --max-time 5 "${PROM}/api/v1/query" \
  --data-urlencode 'query=max_over_time(orpheus_sessions_total{job="orpheus-svc"}[30m])' \
  | "${DEV_PY}" scripts/k8s/scale_report.py --per-pod)"
"${DEV_PY}" scripts/k8s/scale_report.py "${WORK}/logs/scale-watch.jsonl" "${WORK}/scale.load-start" \
  "${WORK}/scale.unload" "${WORK}/logs/scale-a.json" "${WORK}/logs/scale-b.json" \
  "${WORK}"/logs/scale-orpheus-svc-*.log >>"${WORK}/results.txt" \
  || { tail -20 "${WORK}/results.txt"; tail -30 "${WORK}/logs/scale-a.log" "${WORK}/logs/scale-b.log"; die "the scale step lost a session or did not scale"; }
sed -n '/^scale sessions/,$p' "${WORK}/results.txt"
record "sessions started per pod (Prometheus, max_over_time of orpheus_sessions_total): ${PER_POD}"
record "scale step $((SECONDS - t_step)) s"
