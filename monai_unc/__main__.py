"""``python -m monai_unc``: the ``monai-unc`` command line, the same as the console script.

For an environment without the script on ``PATH`` (a virtual environment not activated, a cluster job that runs
one Python): ``python -m monai_unc evaluate -l labels -p pred -o eval`` is ``monai-unc evaluate ...``, with the
same options, output and exit status (:func:`monai_unc.cli.main`).
"""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
