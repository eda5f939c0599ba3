{{/* Names, labels and the serving certificate shared by the templates. */}}

{{- define "nac.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Resource name prefix: the release name, plus "-nac" unless it already contains the chart name. */}}
{{- define "nac.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "nac.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "nac.selectorLabels" -}}
app.kubernetes.io/name: {{ include "nac.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "nac.labels" -}}
helm.sh/chart: {{ include "nac.chart" . }}
{{ include "nac.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: nac
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "nac.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "nac.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "nac.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (toString (default .Chart.AppVersion .Values.image.tag)) }}
{{- end }}
{{- end }}

{{/* The policy document as text: a string verbatim, a map as YAML ("{}" when empty). */}}
{{- define "nac.policyText" -}}
{{- if kindIs "string" .Values.policy }}
{{- .Values.policy }}
{{- else if .Values.policy }}
{{- toYaml .Values.policy }}
{{- else }}
{{- "{}" }}
{{- end }}
{{- end }}

{{/* Secret the pods mount tls.crt/tls.key from. */}}
{{- define "nac.tlsSecretName" -}}
{{- if eq .Values.certs.mode "existing" }}
{{- required "certs.existing.secretName is required with certs.mode=existing" .Values.certs.existing.secretName }}
{{- else }}
{{- default (printf "%s-tls" (include "nac.fullname" .)) .Values.certs.secretName }}
{{- end }}
{{- end }}

{{/* The names the API server may call nac by, then certs.extraHosts. */}}
{{- define "nac.certHosts" -}}
{{- $svc := include "nac.fullname" . }}
{{- $ns := .Release.Namespace }}
{{- $hosts := list (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.%s" $svc $ns .Values.certs.clusterDomain) (printf "%s.%s" $svc $ns) $svc }}
{{- range .Values.certs.extraHosts }}
{{- $hosts = append $hosts (toString .) }}
{{- end }}
{{- toJson $hosts }}
{{- end }}

{{- define "nac.isIP" -}}
{{- if or (regexMatch "^[0-9]+\\.[0-9]+\\.[0-9]+\\.[0-9]+$" .) (contains ":" .) }}true{{- end }}
{{- end }}

{{- define "nac.certManagerCertName" -}}
{{- printf "%s-serving-cert" (include "nac.fullname" .) }}
{{- end }}

{{/*
The self-signed CA and serving certificate as a dict of base64 strings (ca.crt ca.key tls.crt tls.key) plus
"hosts" (a fingerprint of the host names) and "notAfter" (the leaf's expiry, Unix seconds).

Stable across `helm upgrade`: the Secret already in the cluster (read with `lookup`) is reused; its CA is kept
and the leaf is re-issued by it only when the host names changed or expiry is within renewBeforeDays, so the
caBundle in the webhook configurations does not change. Computed once per render and memoised on the root
context, so the Secret and the webhook configurations always agree. Without cluster access (`helm template`,
`helm install --dry-run` without `=server`) lookup returns nothing and fresh certificates are generated.
*/}}
{{- define "nac.selfSignedTLS" -}}
{{- if not (hasKey . "nacSelfSignedTLS") }}
{{- $v := .Values.certs.selfSigned }}
{{- $hostList := include "nac.certHosts" . | fromJsonArray }}
{{- $fingerprint := $hostList | join "," | sha256sum | trunc 16 }}
{{- $now := now | unixEpoch | int64 }}
{{- $existing := lookup "v1" "Secret" .Release.Namespace (include "nac.tlsSecretName" .) }}
{{- $data := dict }}
{{- $ann := dict }}
{{- if $existing }}
{{- $data = default (dict) $existing.data }}
{{- $ann = default (dict) $existing.metadata.annotations }}
{{- end }}
{{- $out := dict }}
{{- $ca := dict }}
{{- $caNotAfter := int64 (default "0" (index $ann "nac.oadp.openshift.io/ca-not-after")) }}
{{- if and (index $data "ca.crt") (index $data "ca.key") (gt $caNotAfter (add $now (mul (int $v.renewBeforeDays) 86400))) }}
{{- $ca = buildCustomCert (index $data "ca.crt") (index $data "ca.key") }}
{{- $_ := set $out "caNotAfter" (toString $caNotAfter) }}
{{- else }}
{{- $ca = genCA "nac-webhook-ca" (int $v.caValidityDays) }}
{{- $_ := set $out "caNotAfter" (toString (add $now (mul (int $v.caValidityDays) 86400))) }}
{{- end }}
{{- $_ := set $out "ca.crt" (b64enc $ca.Cert) }}
{{- $_ := set $out "ca.key" (b64enc $ca.Key) }}
{{- $notAfter := int64 (default "0" (index $ann "nac.oadp.openshift.io/cert-not-after")) }}
{{- $sameCA := eq (index $data "ca.crt" | default "") (index $out "ca.crt") }}
{{- if and $sameCA (index $data "tls.crt") (index $data "tls.key") (eq (index $ann "nac.oadp.openshift.io/cert-hosts" | default "") $fingerprint) (gt $notAfter (add $now (mul (int $v.renewBeforeDays) 86400))) }}
{{- $_ := set $out "tls.crt" (index $data "tls.crt") }}
{{- $_ := set $out "tls.key" (index $data "tls.key") }}
{{- $_ := set $out "notAfter" (toString $notAfter) }}
{{- else }}
{{- $ips := list }}
{{- $dns := list }}
{{- range $hostList }}
{{- if include "nac.isIP" . }}
{{- $ips = append $ips . }}
{{- else }}
{{- $dns = append $dns . }}
{{- end }}
{{- end }}
{{- $cert := genSignedCert (first $hostList) $ips $dns (int $v.validityDays) $ca }}
{{- $_ := set $out "tls.crt" (b64enc $cert.Cert) }}
{{- $_ := set $out "tls.key" (b64enc $cert.Key) }}
{{- $_ := set $out "notAfter" (toString (add $now (mul (int $v.validityDays) 86400))) }}
{{- end }}
{{- $_ := set $out "hosts" $fingerprint }}
{{- $_ := set . "nacSelfSignedTLS" $out }}
{{- end }}
{{- toJson .nacSelfSignedTLS }}
{{- end }}

{{/* A CA bundle value as base64: PEM text is encoded, anything else is taken as base64 already. */}}
{{- define "nac.b64Bundle" -}}
{{- if contains "-----BEGIN" . }}{{ b64enc . }}{{ else }}{{ . | nospace }}{{ end }}
{{- end }}

{{/* caBundle for the webhook configurations, base64; empty in certManager mode (cainjector fills it in). */}}
{{- define "nac.caBundle" -}}
{{- if .Values.webhook.caBundle }}
{{- include "nac.b64Bundle" .Values.webhook.caBundle }}
{{- else if eq .Values.certs.mode "selfSigned" }}
{{- index (include "nac.selfSignedTLS" . | fromJson) "ca.crt" }}
{{- else if eq .Values.certs.mode "existing" }}
{{- include "nac.b64Bundle" (required "certs.existing.caBundle (or webhook.caBundle) is required with certs.mode=existing" .Values.certs.existing.caBundle) }}
{{- end }}
{{- end }}

{{/* clientConfig of one webhook; call with (list $ "/path"). */}}
{{- define "nac.clientConfig" -}}
{{- $ := index . 0 }}
{{- $path := index . 1 -}}
{{- if $.Values.webhook.url -}}
url: {{ printf "%s%s" (trimSuffix "/" $.Values.webhook.url) $path | quote }}
{{- else -}}
service:
  name: {{ include "nac.fullname" $ }}
  namespace: {{ $.Release.Namespace }}
  path: {{ $path | quote }}
  port: {{ $.Values.service.port }}
{{- end }}
{{- with include "nac.caBundle" $ }}
caBundle: {{ . }}
{{- end }}
{{- end }}

{{/* One NAB/NAR webhook; call with (list $ name path resource excludedNamespaces). */}}
{{- /*
The match condition that leaves nac's own requests out of a webhook (its ServiceAccount's user): nac's writes (a
Velero Backup it makes, a finalizer it removes, a NonAdminBackup backup sync re-creates) cost no admission round
trip; every other user still goes through the webhook. Same as `nac webhook-config --service-account`.
*/}}
{{- define "nac.notByNac" -}}
- name: not-by-nac
  expression: {{ printf "request.userInfo.username != 'system:serviceaccount:%s:%s'" .Release.Namespace (include "nac.serviceAccountName" .) | quote }}
{{- end }}

{{- define "nac.proxyHook" -}}
{{- $ := index . 0 -}}
- name: {{ index . 1 }}
  clientConfig:
    {{- include "nac.clientConfig" (list $ (index . 2)) | nindent 4 }}
  rules:
    - apiGroups: ["oadp.openshift.io"]
      apiVersions: ["v1alpha1"]
      operations: ["CREATE", "UPDATE"]
      resources: [{{ index . 3 | quote }}]
      scope: Namespaced
  namespaceSelector:
    matchExpressions:
      - key: kubernetes.io/metadata.name
        operator: NotIn
        values:
          {{- toYaml (index . 4) | nindent 10 }}
  matchConditions:
    {{- include "nac.notByNac" $ | nindent 4 }}
  failurePolicy: Fail
  matchPolicy: Equivalent
  sideEffects: None
  admissionReviewVersions: ["v1"]
  timeoutSeconds: {{ $.Values.webhook.timeoutSeconds }}
{{- end }}
