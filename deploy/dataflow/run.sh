#!/usr/bin/env bash
# Run one pipeline's Flex Template. Pipeline flags go after the name, with underscores, as name=value:
#   PROJECT=my-project REGION=europe-west1 BUCKET=my-bucket bash deploy/dataflow/run.sh select \
#       input=gs://my-bucket/data/*.parquet column=item candidate_range=0:1000 epsilon=1 \
#       output=gs://my-bucket/out/top.json budget_ledger=gs://my-bucket/budget.json dataset_id=shop
# Optional, where the project needs them: SERVICE_ACCOUNT (the workers' service account e-mail), NETWORK,
# SUBNETWORK (regions/REGION/subnetworks/NAME), MACHINE_TYPE (n2-standard-4, ...), MAX_WORKERS (default 20).
set -euo pipefail
PIPELINE="${1:?usage: run.sh PIPELINE name=value ...}"
shift
: "${PROJECT:?set PROJECT}" "${REGION:?set REGION}" "${BUCKET:?set BUCKET}"
# gcloud's ^D^ names the character D between parameters: values may hold commas (features=a,b), so the first
# of these that no value holds.
SEPARATOR=
for candidate in '~' '|' '@' '#' '%' '^'; do
    [[ "$*" != *"$candidate"* ]] && { SEPARATOR="$candidate"; break; }
done
[[ -n "$SEPARATOR" ]] || { echo "run.sh: the parameters hold every separator gcloud could take (~ | @ # % ^)" >&2; exit 2; }
PARAMETERS="^${SEPARATOR}^$(IFS="$SEPARATOR"; echo "$*")"
OPTIONAL=()
[[ -n "${SERVICE_ACCOUNT:-}" ]] && OPTIONAL+=(--service-account-email "$SERVICE_ACCOUNT")
[[ -n "${NETWORK:-}" ]] && OPTIONAL+=(--network "$NETWORK")
[[ -n "${SUBNETWORK:-}" ]] && OPTIONAL+=(--subnetwork "$SUBNETWORK")
[[ -n "${MACHINE_TYPE:-}" ]] && OPTIONAL+=(--worker-machine-type "$MACHINE_TYPE")
gcloud dataflow flex-template run "beam-expmech-${PIPELINE}-$(date +%Y%m%d-%H%M%S)" \
    --project "$PROJECT" --region "$REGION" \
    --template-file-gcs-location "gs://${BUCKET}/templates/${PIPELINE}.json" \
    --temp-location "gs://${BUCKET}/tmp" \
    --max-workers "${MAX_WORKERS:-20}" \
    "${OPTIONAL[@]}" \
    --parameters "$PARAMETERS"
