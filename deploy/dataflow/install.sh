#!/usr/bin/env bash
# Installs beam-expmech from SOURCE (a checkout's root) into the Python that holds Apache Beam, keeping that
# Beam: in Beam's SDK image, the workers' Beam must be the one the launcher submits the job with. Then checks
# that the package and its compiled dependencies import. The Dockerfile runs it; so does tests/deploy.
#   bash deploy/dataflow/install.sh SOURCE     (PYTHON: the interpreter, default python)
set -euo pipefail
SOURCE="${1:?usage: install.sh SOURCE}"
PYTHON="${PYTHON:-python}"
BEAM="$("$PYTHON" -c 'import apache_beam; print(apache_beam.__version__)')"
"$PYTHON" -m pip install --no-cache-dir --quiet "$SOURCE" "apache-beam[gcp]==${BEAM}"
cd /  # not the source folder: the installed package must import on its own
"$PYTHON" - "$BEAM" <<'CHECK'
import sys

import apache_beam
import gmpy2  # noqa: F401  (the exact sampler's MPFR)
import pipelines.select  # noqa: F401
from beam_expmech.releases import PrivateRelease  # noqa: F401

if apache_beam.__version__ != sys.argv[1]:
    sys.exit(f"install.sh: Beam changed from {sys.argv[1]} to {apache_beam.__version__}")
print(f"beam-expmech installed beside Apache Beam {apache_beam.__version__}")
CHECK
