"""vitviz web app: `python app.py [--host H] [--port P] [--share] [--model M] [--device D] [--depth-model M]`."""

from vitviz.app import main

if __name__ == "__main__":
    main()
