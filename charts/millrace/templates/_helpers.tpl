{{/*
Names, labels, and the environment every Millrace container shares.
*/}}

{{- define "millrace.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "millrace.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "millrace.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels of every object. Call with the root context. */}}
{{- define "millrace.labels" -}}
helm.sh/chart: {{ include "millrace.chart" . }}
app.kubernetes.io/name: {{ include "millrace.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: millrace
{{- end -}}

{{/* Selector labels of one component: (dict "ctx" $ "component" "web"). */}}
{{- define "millrace.selectorLabels" -}}
app.kubernetes.io/name: {{ include "millrace.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* All labels of one component's objects: (dict "ctx" $ "component" "web"). */}}
{{- define "millrace.componentLabels" -}}
{{ include "millrace.labels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "millrace.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "millrace.secretName" -}}
{{- printf "%s-secrets" (include "millrace.fullname" .) -}}
{{- end -}}

{{- define "millrace.brokerName" -}}
{{- printf "%s-broker" (include "millrace.fullname" .) -}}
{{- end -}}

{{- define "millrace.brokerHeadlessName" -}}
{{- printf "%s-broker-headless" (include "millrace.fullname" .) -}}
{{- end -}}

{{- define "millrace.tlsSecretName" -}}
{{- if .Values.tls.existingSecret -}}
{{- .Values.tls.existingSecret -}}
{{- else -}}
{{- printf "%s-broker-tls" (include "millrace.fullname" .) -}}
{{- end -}}
{{- end -}}

{{/* The bundled subcharts' names, as Bitnami's common.names.fullname makes them. */}}
{{- define "millrace.postgresql.fullname" -}}
{{- if .Values.postgresql.fullnameOverride -}}
{{- .Values.postgresql.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default "postgresql" .Values.postgresql.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "millrace.redis.fullname" -}}
{{- if .Values.redis.fullnameOverride -}}
{{- .Values.redis.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default "redis" .Values.redis.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
Whether the migration Job runs after the install rather than before it. With the bundled
Postgres it must: pre-install hooks run before any of the release's objects, the subchart's
database included, exist. The pods then wait in an init container until migrations are applied.
*/}}
{{- define "millrace.migrateAfterInstall" -}}
{{- if and .Values.migrations.enabled .Values.postgresql.enabled -}}true{{- end -}}
{{- end -}}

{{/* Values the chart cannot work without, checked once (called from the web Deployment). */}}
{{- define "millrace.validate" -}}
{{- if and (not .Values.postgresql.enabled) (not .Values.externalDatabase.url) (not .Values.externalDatabase.existingSecret) -}}
{{- fail "Postgres: set externalDatabase.url or externalDatabase.existingSecret, or postgresql.enabled=true" -}}
{{- end -}}
{{- if and .Values.postgresql.enabled (or .Values.externalDatabase.url .Values.externalDatabase.existingSecret) -}}
{{- fail "Postgres: postgresql.enabled=true and externalDatabase are both set; choose one" -}}
{{- end -}}
{{- if and (not .Values.redis.enabled) (not .Values.externalRedis.url) (not .Values.externalRedis.existingSecret) -}}
{{- fail "Redis: set externalRedis.url or externalRedis.existingSecret, or redis.enabled=true" -}}
{{- end -}}
{{- if and .Values.redis.enabled (or .Values.externalRedis.url .Values.externalRedis.existingSecret) -}}
{{- fail "Redis: redis.enabled=true and externalRedis are both set; choose one" -}}
{{- end -}}
{{- if and .Values.redis.enabled (ne .Values.redis.architecture "standalone") -}}
{{- fail "Redis: the chart connects to the bundled Redis' master only; use redis.architecture=standalone" -}}
{{- end -}}
{{- if le (int .Values.brokers.terminationGracePeriodSeconds) (int .Values.brokers.controlledShutdownTimeoutSeconds) -}}
{{- fail "brokers.terminationGracePeriodSeconds must be longer than brokers.controlledShutdownTimeoutSeconds" -}}
{{- end -}}
{{- if and .Values.tls.enabled (not .Values.tls.existingSecret) (or (not .Values.tls.cert) (not .Values.tls.key)) -}}
{{- fail "TLS: set tls.existingSecret, or tls.cert and tls.key" -}}
{{- end -}}
{{- if and .Values.brokers.externalAccess.enabled (not .Values.tls.enabled) -}}
{{- fail "brokers.externalAccess serves the TLS listener: set tls.enabled=true" -}}
{{- end -}}
{{- if and .Values.brokers.externalAccess.enabled (not .Values.brokers.externalAccess.advertisedHost) -}}
{{- fail "brokers.externalAccess.advertisedHost is required, e.g. broker-{id}.kafka.example.com" -}}
{{- end -}}
{{- if .Values.connect.enabled -}}
{{- $credentials := or .Values.connect.credentials.username .Values.connect.credentials.password .Values.connect.credentials.bootstrapServers -}}
{{- if and .Values.connect.existingSecret $credentials -}}
{{- fail "connect: connect.existingSecret and connect.credentials are both set; choose one" -}}
{{- end -}}
{{- if and (not .Values.connect.existingSecret) (or (not .Values.connect.credentials.username) (not .Values.connect.credentials.password)) -}}
{{- fail "connect: set connect.existingSecret (a Secret with worker.properties), or connect.credentials.username and .password (a service account's API key id and secret)" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* ALLOWED_HOSTS: configured hosts and Ingress hosts. Probes and scrapes, which name the pod's
IP as Host, are answered before the host check (control_plane/core/probes.py). */}}
{{- define "millrace.allowedHosts" -}}
{{- $hosts := list -}}
{{- range .Values.config.allowedHosts -}}
{{- $hosts = append $hosts . -}}
{{- end -}}
{{- if .Values.web.ingress.enabled -}}
{{- range .Values.web.ingress.hosts -}}
{{- $hosts = append $hosts .host -}}
{{- end -}}
{{- end -}}
{{- $hosts | uniq | join "," -}}
{{- end -}}

{{/* An env entry read from a Secret: (dict "name" "SECRET_KEY" "secret" "s" "key" "k"). */}}
{{- define "millrace.secretEnv" -}}
- name: {{ .name }}
  valueFrom:
    secretKeyRef:
      name: {{ .secret | quote }}
      key: {{ .key | quote }}
{{- end -}}

{{/*
The environment of every Millrace container: (dict "ctx" $ "redis" true).
Secrets come from their existingSecret when set, else from <fullname>-secrets. With the bundled
subcharts, DATABASE_URL and REDIS_URL are built from their Services and password Secrets by
Kubernetes' $(VAR) expansion, so the passwords never pass through this chart.
The migration Job passes "redis" false: it needs no Redis, and at pre-install the bundled
Redis' Secret does not exist yet.
*/}}
{{- define "millrace.env" -}}
{{- $ctx := .ctx -}}
{{- $secret := include "millrace.secretName" $ctx -}}
- name: MILLRACE_ENV
  value: production
- name: ALLOWED_HOSTS
  value: {{ include "millrace.allowedHosts" $ctx | quote }}
{{- with $ctx.Values.config.csrfTrustedOrigins }}
- name: CSRF_TRUSTED_ORIGINS
  value: {{ join "," . | quote }}
{{- end }}
- name: SECURE_SSL_REDIRECT
  value: {{ $ctx.Values.config.secureSslRedirect | quote }}
- name: SECURE_PROXY_SSL_HEADER
  value: {{ $ctx.Values.config.secureProxySslHeader | quote }}
- name: SECURE_HSTS_SECONDS
  value: {{ int $ctx.Values.config.hstsSeconds | quote }}
- name: MILLRACE_TRUSTED_PROXIES
  value: {{ int $ctx.Values.config.trustedProxies | quote }}
- name: MILLRACE_LOG_FORMAT
  value: {{ $ctx.Values.config.logFormat | quote }}
- name: LOG_LEVEL
  value: {{ $ctx.Values.config.logLevel | quote }}
- name: MILLRACE_CLUSTER_ID
  value: {{ $ctx.Values.config.clusterId | quote }}
- name: MILLRACE_DEFAULT_REPLICATION_FACTOR
  value: {{ int $ctx.Values.config.defaultReplicationFactor | quote }}
{{ include "millrace.secretEnv" (dict "name" "SECRET_KEY" "secret" (default $secret $ctx.Values.secrets.secretKey.existingSecret) "key" (ternary $ctx.Values.secrets.secretKey.existingSecretKey "secret-key" (not (empty $ctx.Values.secrets.secretKey.existingSecret)))) }}
{{ include "millrace.secretEnv" (dict "name" "MILLRACE_INTERNAL_SECRET" "secret" (default $secret $ctx.Values.secrets.internalSecret.existingSecret) "key" (ternary $ctx.Values.secrets.internalSecret.existingSecretKey "internal-secret" (not (empty $ctx.Values.secrets.internalSecret.existingSecret)))) }}
{{ include "millrace.secretEnv" (dict "name" "MILLRACE_METRICS_TOKEN" "secret" (default $secret $ctx.Values.secrets.metricsToken.existingSecret) "key" (ternary $ctx.Values.secrets.metricsToken.existingSecretKey "metrics-token" (not (empty $ctx.Values.secrets.metricsToken.existingSecret)))) }}
{{- if $ctx.Values.postgresql.enabled }}
{{- $pg := include "millrace.postgresql.fullname" $ctx }}
{{ include "millrace.secretEnv" (dict "name" "MILLRACE_POSTGRES_PASSWORD" "secret" (default $pg $ctx.Values.postgresql.auth.existingSecret) "key" (ternary $ctx.Values.postgresql.auth.secretKeys.userPasswordKey "password" (not (empty $ctx.Values.postgresql.auth.existingSecret)))) }}
- name: DATABASE_URL
  value: {{ printf "postgres://%s:$(MILLRACE_POSTGRES_PASSWORD)@%s:5432/%s" $ctx.Values.postgresql.auth.username $pg $ctx.Values.postgresql.auth.database | quote }}
{{- else if $ctx.Values.externalDatabase.existingSecret }}
{{ include "millrace.secretEnv" (dict "name" "DATABASE_URL" "secret" $ctx.Values.externalDatabase.existingSecret "key" $ctx.Values.externalDatabase.existingSecretKey) }}
{{- else }}
{{ include "millrace.secretEnv" (dict "name" "DATABASE_URL" "secret" $secret "key" "database-url") }}
{{- end }}
{{- if .redis }}
{{- if $ctx.Values.redis.enabled }}
{{- $redis := include "millrace.redis.fullname" $ctx }}
{{- if $ctx.Values.redis.auth.enabled }}
{{ include "millrace.secretEnv" (dict "name" "MILLRACE_REDIS_PASSWORD" "secret" (default $redis $ctx.Values.redis.auth.existingSecret) "key" (default "redis-password" $ctx.Values.redis.auth.existingSecretPasswordKey)) }}
- name: REDIS_URL
  value: {{ printf "redis://:$(MILLRACE_REDIS_PASSWORD)@%s-master:6379/0" $redis | quote }}
{{- else }}
- name: REDIS_URL
  value: {{ printf "redis://%s-master:6379/0" $redis | quote }}
{{- end }}
{{- else if $ctx.Values.externalRedis.existingSecret }}
{{ include "millrace.secretEnv" (dict "name" "REDIS_URL" "secret" $ctx.Values.externalRedis.existingSecret "key" $ctx.Values.externalRedis.existingSecretKey) }}
{{- else }}
{{ include "millrace.secretEnv" (dict "name" "REDIS_URL" "secret" $secret "key" "redis-url") }}
{{- end }}
{{- end }}
{{- with $ctx.Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/*
Waits until every migration is applied (the bundled-Postgres install, where the migration Job
runs after the pods are created). Call with the root context.
*/}}
{{- define "millrace.waitForMigrations" -}}
{{- if include "millrace.migrateAfterInstall" . }}
initContainers:
  - name: wait-for-migrations
    image: {{ include "millrace.image" . | quote }}
    imagePullPolicy: {{ .Values.image.pullPolicy }}
    args:
      - sh
      - -c
      - |
        until python /app/manage.py migrate --check >/dev/null 2>&1; do
          echo "waiting for the database and its migrations"
          sleep 5
        done
    env:
      {{- include "millrace.env" (dict "ctx" . "redis" false) | nindent 6 }}
      # Without REDIS_URL, settings make Celery's folders in the data directory: keep them out
      # of the pod's real one (a broker's volume).
      - name: MILLRACE_DATA_DIR
        value: /tmp/millrace
    securityContext:
      {{- toYaml .Values.containerSecurityContext | nindent 6 }}
    resources:
      {{- toYaml .Values.migrations.resources | nindent 6 }}
    volumeMounts:
      - name: tmp
        mountPath: /tmp
{{- end }}
{{- end -}}

{{/* Pod fields every Millrace pod shares (besides securityContext). Call with the root context. */}}
{{- define "millrace.podCommon" -}}
automountServiceAccountToken: false
{{- with .Values.serviceAccountName }}
serviceAccountName: {{ . }}
{{- end }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}
