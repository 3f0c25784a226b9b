# KEDA in the check's cluster (sourced by scripts/k8s-check.sh, whose functions and variables
# it uses): the release's own manifests (config/ of the module, kept by build-module.sh) with
# this cluster's differences patched in, its two binaries in images FROM scratch.
#
# What differs from a KEDA install on an ordinary cluster, and why:
# - No kube-proxy and no CoreDNS here, so neither the `kubernetes` Service nor KEDA's own
#   Services route. Both KEDA pods run on the host network: they reach the API server on
#   127.0.0.1 (KUBERNETES_SERVICE_HOST/PORT), the metrics server reaches the operator's gRPC
#   metrics service on 127.0.0.1 (with the authority its certificate names), and the API
#   server's aggregator dials the metrics server's endpoint (the node address, on the pod
#   bridge) directly (--enable-aggregator-routing). Every port is a free one, bound to
#   loopback or the node address (the metrics server's own Prometheus port has no address
#   flag: it listens on all, and nothing sends to it).
# - The certificates are made here (one CA, one certificate for both pods and both ends of
#   their mTLS), put in the Secret kedaorg-certs before the pods start, and the CA into the
#   APIService; the operator's certificate rotation is off (it would wait for the kubelet to
#   project the Secret it writes, a minute or more).
# - No admission webhooks (they need a routable Service), no leader election (one replica).
# keda_install KEDA_DIR: after it the APIService v1beta1.external.metrics.k8s.io is Available.
keda_images() {  # KEDA_DIR: the images as archives, built once next to the binaries
  local dir="$1" b name
  for b in keda keda-adapter; do
    name="localhost/${b}:${KEDA_TAG}"
    if [[ ! -s "${dir}/${b}.tar" ]]; then
      local c
      c="$(buildah from scratch)"
      buildah copy "${c}" "${dir}/bin/${b}" "/${b}" >/dev/null
      buildah config --entrypoint "[\"/${b}\"]" --user 65532:65532 "${c}"
      buildah commit -q "${c}" "${name}" >/dev/null
      buildah rm "${c}" >/dev/null
      buildah push -q "${name}" "docker-archive:${dir}/${b}.tar.tmp:${name}"
      buildah rmi "${name}" >/dev/null
      mv "${dir}/${b}.tar.tmp" "${dir}/${b}.tar"
    fi
    "${CTR[@]}" images import "${dir}/${b}.tar" >/dev/null
  done
}

keda_certs() {  # into PKI/keda: ca.crt, tls.crt, tls.key
  local d="${PKI}/keda" san="" n
  mkdir -p "${d}"
  openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=orpheus-k8s-keda-ca \
    -keyout "${d}/ca.key" -out "${d}/ca.crt" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -subj /CN=keda-operator -keyout "${d}/tls.key" \
    -out "${d}/tls.csr" 2>/dev/null
  for n in keda-operator keda-metrics-apiserver; do
    san+="DNS:${n},DNS:${n}.keda,DNS:${n}.keda.svc,DNS:${n}.keda.svc.cluster.local,"
  done
  printf 'subjectAltName=%sIP:127.0.0.1,IP:%s\nextendedKeyUsage=serverAuth,clientAuth\n' \
    "${san}" "${NODE_IP}" >"${d}/san.ext"
  openssl x509 -req -in "${d}/tls.csr" -CA "${d}/ca.crt" -CAkey "${d}/ca.key" -CAcreateserial \
    -days 1 -extfile "${d}/san.ext" -out "${d}/tls.crt" 2>/dev/null
}

keda_install() {
  local dir="$1" t0=${SECONDS}
  KEDA_TAG="${KEDA_VERSION#v}"  # the images' tag
  keda_images "${dir}"
  keda_certs
  local op_metrics op_probe grpc_port ad_secure ad_metrics
  op_metrics="$(free_port)"; op_probe="$(free_port)"; grpc_port="$(free_port)"
  ad_secure="$(free_port)"; ad_metrics="$(free_port)"
  local K="${WORK}/keda"
  mkdir -p "${K}" && cp -r "${dir}/config" "${K}/config"
  local env_ops='
    {"op": "add", "path": "/spec/template/spec/hostNetwork", "value": true},
    {"op": "remove", "path": "/spec/template/spec/containers/0/ports"},
    {"op": "replace", "path": "/spec/template/spec/containers/0/imagePullPolicy", "value": "Never"},
    {"op": "add", "path": "/spec/template/spec/containers/0/env/-", "value": {"name": "KUBERNETES_SERVICE_HOST", "value": "127.0.0.1"}},
    {"op": "add", "path": "/spec/template/spec/containers/0/env/-", "value": {"name": "KUBERNETES_SERVICE_PORT", "value": "'"${API_PORT}"'"}}'
  probe_ops() {  # PORT: both probes on it, from the first second
    local p
    for p in livenessProbe readinessProbe; do
      printf ',\n    {"op": "replace", "path": "/spec/template/spec/containers/0/%s/httpGet/port", "value": %s}' "${p}" "$1"
      printf ',\n    {"op": "replace", "path": "/spec/template/spec/containers/0/%s/initialDelaySeconds", "value": 1}' "${p}"
      printf ',\n    {"op": "add", "path": "/spec/template/spec/containers/0/%s/periodSeconds", "value": 2}' "${p}"
    done
  }
  # JSON patches (RFC 6902), one file each
  cat >"${K}/operator.json" <<EOF
[${env_ops}$(probe_ops "${op_probe}"),
 {"op": "replace", "path": "/spec/template/spec/volumes/0/secret/optional", "value": false},
 {"op": "replace", "path": "/spec/template/spec/containers/0/args", "value": [
   "--zap-log-level=info", "--zap-encoder=console", "--enable-cert-rotation=false",
   "--metrics-bind-address=127.0.0.1:${op_metrics}",
   "--health-probe-bind-address=${NODE_IP}:${op_probe}",
   "--metrics-service-bind-address=127.0.0.1:${grpc_port}"]}]
EOF
  cat >"${K}/metrics-server.json" <<EOF
[${env_ops}$(probe_ops "${ad_secure}"),
 {"op": "replace", "path": "/spec/template/spec/containers/0/args", "value": [
   "--secure-port=${ad_secure}", "--bind-address=${NODE_IP}", "--port=${ad_metrics}",
   "--zap-log-level=info", "--zap-encoder=console",
   "--client-ca-file=/certs/ca.crt", "--tls-cert-file=/certs/tls.crt",
   "--tls-private-key-file=/certs/tls.key", "--cert-dir=/certs",
   "--metrics-service-address=127.0.0.1:${grpc_port}",
   "--metrics-service-grpc-authority=keda-operator.keda.svc.cluster.local"]}]
EOF
  printf '[{"op": "replace", "path": "/spec/ports/0/targetPort", "value": %s}]\n' "${ad_secure}" \
    >"${K}/service.json"
  printf '[{"op": "add", "path": "/spec/caBundle", "value": "%s"}]\n' "$(base64 -w0 "${PKI}/keda/ca.crt")" \
    >"${K}/apiservice.json"
  cat >"${K}/kustomization.yaml" <<EOF
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources: [config/crd, config/general, config/rbac, config/manager, config/metrics-server, config/service_account]
images:
  - {name: ghcr.io/kedacore/keda, newName: localhost/keda, newTag: "${KEDA_TAG}"}
  - {name: ghcr.io/kedacore/keda-metrics-apiserver, newName: localhost/keda-adapter, newTag: "${KEDA_TAG}"}
patches:
  - {path: operator.json, target: {kind: Deployment, name: keda-operator}}
  - {path: metrics-server.json, target: {kind: Deployment, name: keda-metrics-apiserver}}
  - {path: service.json, target: {kind: Service, name: keda-metrics-apiserver}}
  - {path: apiservice.json, target: {kind: APIService, name: v1beta1.external.metrics.k8s.io}}
EOF
  kustomize build "${K}" >"${K}/keda.yaml"
  k create namespace keda >/dev/null
  k -n keda create secret generic kedaorg-certs --from-file="${PKI}/keda/ca.crt" \
    --from-file="${PKI}/keda/tls.crt" --from-file="${PKI}/keda/tls.key" >/dev/null
  # server-side: the ScaledJob CRD is larger than client-side apply's annotation allows
  k apply --server-side -f "${K}/keda.yaml" >"${WORK}/logs/keda-apply.log" \
    || { cat "${WORK}/logs/keda-apply.log"; die "KEDA's manifests were refused"; }
  keda_ready() {
    [[ "$(k -n keda get pods -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' | grep -c True)" == 2 ]]
  }
  wait_for 180 "KEDA's operator and metrics server Ready" keda_ready
  apiservice_available() {
    [[ "$(k get apiservice v1beta1.external.metrics.k8s.io -o jsonpath='{.status.conditions[?(@.type=="Available")].status}')" == True ]]
  }
  wait_for 120 "the APIService v1beta1.external.metrics.k8s.io Available" apiservice_available
  KEDA_S=$((SECONDS - t0))
}
