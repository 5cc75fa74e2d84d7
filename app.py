"""vitviz web app: `python app.py [--host H] [--port P] [--share] [--model M] [--device D] [--depth-model M]`."""

import sys

from vitviz.cli import serve

if __name__ == "__main__":
    sys.exit(serve(sys.argv[1:], prog="app.py"))
