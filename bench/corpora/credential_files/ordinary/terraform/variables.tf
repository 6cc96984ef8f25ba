variable "db_password" {
  description = "Password of the database's admin user"
  type        = string
  sensitive   = true
}
