"""vitviz web app: `python app.py [--host H] [--port P] [--share] [--model M] [--device D]`."""

from vitviz.ui import main

if __name__ == "__main__":
    main()
