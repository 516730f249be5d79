"""The public silicon sample as a scoreboard: every in-scope SGLang MoE row mapped to epsim
scenarios in SGLang's names, predicted (or listed with what the spec lacks), beside AIConfigurator's
estimate of the same row (docs/silicon.md).

`rows` reads the CSV, `mapping` turns a row into scenarios or reasons, `run` simulates a row's
closed loop, `peer` runs AIConfigurator, `scoreboard` runs rows in parallel, `report` and
`document` table and write the results. Validation only: no fitting code reads these rows.
"""
