"""The gate every call passes: schema validation, policy and rules, approval, hooks, audit."""
