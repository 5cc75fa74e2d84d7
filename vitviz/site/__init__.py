"""The static site: the whole ViT in each visitor's browser. `build.build` writes the folder, `serve.serve` serves
it on this machine with the headers its runtime's threads need, and `graph` is the model as the browser runs it."""
