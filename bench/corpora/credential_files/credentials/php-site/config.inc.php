<?php
/* phpMyAdmin configuration */
$cfg['blowfish_secret'] = 'c0ffee7a9b8c7d6e5f4a3b2c1d0e9f8a';
$i = 0;
$i++;
$cfg['Servers'][$i]['auth_type'] = 'config';
$cfg['Servers'][$i]['host'] = 'db.internal';
$cfg['Servers'][$i]['user'] = 'pma';
$cfg['Servers'][$i]['password'] = 'Xq9!vT4#pL2@wZ7';
