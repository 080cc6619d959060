"""Agent Skills (SKILL.md folders): loader, validator and bundled skills."""
