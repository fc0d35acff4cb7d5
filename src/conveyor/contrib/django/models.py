"""No models: Conveyor's tables belong to Conveyor. The module exists so that Django
sends this app ``post_migrate`` (it does only for apps with a models module)."""
