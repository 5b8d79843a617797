"""The Flex Template's entry file: runs ``pipelines.$BEAM_EXPMECH_PIPELINE`` as a module.

Never the pipeline file itself as a script: run as a script, ``pipelines/select.py`` would
shadow the standard library's ``select`` module (docs/DESIGN.md, section 3). Where the image
names itself (``BEAM_EXPMECH_SDK_CONTAINER_IMAGE``, the Dockerfile's IMAGE), the workers run it
(``--sdk_container_image``), the package already installed, unless the job's own flags name another.
"""

import os
import runpy
import sys


def with_sdk_container_image(argv: list[str], image: str | None) -> list[str]:
    """``argv`` with ``--sdk_container_image=image`` added, unless it names one already or there is no image."""
    given = any(arg.split("=", 1)[0] in ("--sdk_container_image", "--sdk-container-image") for arg in argv)
    return argv if given or not image else [*argv, f"--sdk_container_image={image}"]


if __name__ == "__main__":
    sys.argv[1:] = with_sdk_container_image(sys.argv[1:], os.environ.get("BEAM_EXPMECH_SDK_CONTAINER_IMAGE"))
    runpy.run_module(f"pipelines.{os.environ['BEAM_EXPMECH_PIPELINE']}", run_name="__main__", alter_sys=True)
