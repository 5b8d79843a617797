#!/usr/bin/env bash
# Build one pipeline's image (its Flex Template launcher and its workers' SDK container: Dockerfile) and its
# Flex Template spec (run from the repository root).
#   PROJECT=my-project REGION=europe-west1 BUCKET=my-bucket bash deploy/dataflow/build.sh select
# TAG (default: the checkout's commit) names the image; REPOSITORY an Artifact Registry Docker repository.
set -euo pipefail
PIPELINE="${1:?usage: build.sh select|quantiles|learn|synthesize}"
: "${PROJECT:?set PROJECT}" "${REGION:?set REGION}" "${BUCKET:?set BUCKET}"
REPOSITORY="${REPOSITORY:-beam-expmech}"
TAG="${TAG:-$(git rev-parse --short HEAD)}"
IMAGE="${REGION}-docker.pkg.dev/${PROJECT}/${REPOSITORY}/${PIPELINE}:${TAG}"

gcloud builds submit --project "$PROJECT" --region "$REGION" \
    --config <(printf 'steps:\n- name: gcr.io/cloud-builders/docker\n  args: [build, --build-arg, PIPELINE=%s, --build-arg, IMAGE=%s, -f, deploy/dataflow/Dockerfile, -t, %s, .]\nimages: [%s]\n' \
        "$PIPELINE" "$IMAGE" "$IMAGE" "$IMAGE") .
gcloud dataflow flex-template build "gs://${BUCKET}/templates/${PIPELINE}.json" \
    --project "$PROJECT" --image "$IMAGE" --sdk-language PYTHON \
    --metadata-file "deploy/dataflow/${PIPELINE}/metadata.json"
echo "template: gs://${BUCKET}/templates/${PIPELINE}.json (image ${IMAGE})"
