"""The Flex Template's entry file: runs ``pipelines.$BEAM_EXPMECH_PIPELINE`` as a module.

Never the pipeline file itself as a script: run as a script, ``pipelines/select.py`` would
shadow the standard library's ``select`` module (docs/DESIGN.md, section 3).
"""

import os
import runpy

if __name__ == "__main__":
    runpy.run_module(f"pipelines.{os.environ['BEAM_EXPMECH_PIPELINE']}", run_name="__main__", alter_sys=True)
