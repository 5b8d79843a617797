#!/usr/bin/env bash
# Run one pipeline's Flex Template. Pipeline flags go after the name, with underscores, as name=value:
#   PROJECT=my-project REGION=europe-west1 BUCKET=my-bucket bash deploy/dataflow/run.sh select \
#       input=gs://my-bucket/data/*.parquet column=item candidate_range=0:1000 epsilon=1 \
#       output=gs://my-bucket/out/top.json budget_ledger=gs://my-bucket/budget.json dataset_id=shop
set -euo pipefail
PIPELINE="${1:?usage: run.sh PIPELINE name=value ...}"
shift
: "${PROJECT:?set PROJECT}" "${REGION:?set REGION}" "${BUCKET:?set BUCKET}"
PARAMETERS="^~^$(IFS='~'; echo "$*")"  # "~" separates them: values may hold commas (features=a,b)
gcloud dataflow flex-template run "beam-expmech-${PIPELINE}-$(date +%Y%m%d-%H%M%S)" \
    --project "$PROJECT" --region "$REGION" \
    --template-file-gcs-location "gs://${BUCKET}/templates/${PIPELINE}.json" \
    --temp-location "gs://${BUCKET}/tmp" \
    --max-workers "${MAX_WORKERS:-20}" \
    --parameters "$PARAMETERS"
