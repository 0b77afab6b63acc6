"""`python -m app.panels.tour --record`: record the traces the arrival view and the guided tour show."""

from .callbacks import main

main()
