//! A Table column's definition, and the ones every printer shares (Name, Age).

/// One column: name, type, priority (1 = only with `-o wide`).
pub struct Column {
    pub name: &'static str,
    pub kind: &'static str,
    pub priority: u8,
    pub description: &'static str,
}

pub(super) const fn col(
    name: &'static str,
    kind: &'static str,
    priority: u8,
    description: &'static str,
) -> Column {
    Column {
        name,
        kind,
        priority,
        description,
    }
}

pub(super) const NAME: Column = col(
    "Name",
    "string",
    0,
    "Name must be unique within a namespace.",
);
pub(super) const AGE: Column = col("Age", "string", 0, "Time since the object was created.");
