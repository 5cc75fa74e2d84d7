"""One module per tab, named by its id in `vitviz.tabs`: each builds its tab (`build(ctx)`) and wires its own events;
`vitviz.app.layout` composes them in the tabs' order."""
