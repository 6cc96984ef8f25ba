<?php
define('DB_HOST', 'db.internal');
define('DB_PASSWORD', 'Xq9!vT4#pL2@wZ7');
