"""TSpoon's bank transfers: accounts in a shared table, moved between by OLTP transfers."""
