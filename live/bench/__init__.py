"""The measurement harness around the live model: benches that time it and checks that hold it
equal to a reference, each writing `epsim.records` lines. The model (`live.*` outside this
package) never imports it."""
