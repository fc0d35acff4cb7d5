"""A tiny shop whose checkout hands its slow work to Conveyor (see ../README.md)."""
