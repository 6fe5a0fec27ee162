"""terraform — render a saved gpuprov plan as Terraform JSON and check it against provider schemas.

Public API:

* ``terraform.render.render_plan(plan) -> dict[str, dict]``  file name → Terraform JSON document
* ``terraform.write.write_files(files, out_dir) -> list[Path]``  atomic, indent 2, sorted keys
* ``terraform.schema_check.check_document(doc, schemas=None, *, file=...) -> list[Problem]``
* ``terraform.schema_check.check_files(files, schemas=None) -> list[Problem]``  (whole module)
* ``terraform.schema_check.check_dir(path) -> list[Problem]``  (every ``*.tf.json`` in ``path``)

The provider schemas the checker uses are bundled in ``terraform/schemas/`` (see PROVENANCE.md).
"""
