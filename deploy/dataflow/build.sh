#!/usr/bin/env bash
# Build the launcher image and the Flex Template spec of one pipeline (run from the repository root).
#   PROJECT=my-project REGION=europe-west1 BUCKET=my-bucket bash deploy/dataflow/build.sh select
set -euo pipefail
PIPELINE="${1:?usage: build.sh select|quantiles|learn|synthesize}"
: "${PROJECT:?set PROJECT}" "${REGION:?set REGION}" "${BUCKET:?set BUCKET}"
REPOSITORY="${REPOSITORY:-beam-expmech}"   # an Artifact Registry Docker repository in REGION
IMAGE="${REGION}-docker.pkg.dev/${PROJECT}/${REPOSITORY}/${PIPELINE}:latest"

gcloud builds submit --project "$PROJECT" --region "$REGION" \
    --config <(printf 'steps:\n- name: gcr.io/cloud-builders/docker\n  args: [build, --build-arg, PIPELINE=%s, -f, deploy/dataflow/Dockerfile, -t, %s, .]\nimages: [%s]\n' \
        "$PIPELINE" "$IMAGE" "$IMAGE") .
gcloud dataflow flex-template build "gs://${BUCKET}/templates/${PIPELINE}.json" \
    --project "$PROJECT" --image "$IMAGE" --sdk-language PYTHON \
    --metadata-file "deploy/dataflow/${PIPELINE}/metadata.json"
echo "template: gs://${BUCKET}/templates/${PIPELINE}.json"
