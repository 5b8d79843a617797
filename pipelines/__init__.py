"""The runnable jobs (``python -m pipelines.NAME``) and what they share."""

import sys

from pipelines import startup

if startup.launched_as_command():  # not when a program or a test imports the package
    startup.skip_unused_google_cloud(sys.argv[1:])
    startup.limit_malloc_arenas()  # before Beam starts its threads
