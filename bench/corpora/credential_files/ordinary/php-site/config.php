<?php
// Site settings: nothing secret lives here (the database password is read from the environment)
define('SITE_NAME', 'Course Catalogue');
define('BASE_URL', 'https://courses.example.org/');
define('ITEMS_PER_PAGE', 25);
define('DEBUG', false);
define('DB_PASSWORD', getenv('DB_PASSWORD'));
define('PASSWORD_MIN_LENGTH', 12);
$timezone = 'Europe/Berlin';
