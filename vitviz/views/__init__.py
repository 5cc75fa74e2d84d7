"""What each view of the app shows, as images and figures, one module per tab (named as its tab in
`vitviz.tabs`) and the drawing they share in `common`: each takes an `Analysis` (a notebook's, the CLI's) or the
server's `derived.Derived` of one, which answers the same. The app's tab modules only wire these to widgets."""
